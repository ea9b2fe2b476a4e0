"""Span inputs turned into conversation tables before a run reads them.

``export_kind`` looks at one input file: an OpenTelemetry Collector export (JSON Lines of OTLP trace requests,
gzip or not, found by its first line) or a Parquet table of spans (found by its columns) is a span export;
every other file is a table, and a compressed file that is no span export is refused as tables refuse it.
An export, or a Phoenix project's spans, is read piece by piece into span facts on disk, then joined into
conversation rows (``traces.conversations``) written as Parquet in a working folder. Which inputs a run has,
and whose working folder that is, is ``sources``'s."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Final
from urllib.parse import parse_qs, unquote, urlsplit

import polars as pl
import pyarrow.parquet as pq

from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.core.schema import NOTHING_TO_JUDGE
from faithfulness_pipeline.tables.inputs import PARQUET, compression_of, input_format, refuse_compressed
from faithfulness_pipeline.tables.read import file_schema, iter_chunks
from faithfulness_pipeline.tables.storage import Place
from faithfulness_pipeline.tables.write import process_is_alive
from faithfulness_pipeline.traces.conversations import FACTS_SCHEMA, SpanCount, conversations, count_copies, span_facts
from faithfulness_pipeline.traces.phoenix import PhoenixClient
from faithfulness_pipeline.traces.spans import Span, is_otlp_export, is_span_table, otlp_spans, table_spans
from faithfulness_pipeline.traces.urls import scrubbed

#: Suffixes a table is read by without looking inside: a Parquet or CSV file is never an OTLP export.
_TABLE_ONLY: Final = frozenset({".parquet", ".csv"})
_PIECE_ROWS: Final = 5_000
#: What :func:`export_kind` says of a file that is no span export.
TABLE: Final = "table"
#: Working folders of span staging are named after their host and process, so that a later run on the host
#: can remove those whose process is gone (a SIGKILLed run cleans nothing up, and its staged conversations, the
#: users' text, would stay in the temporary folder) and leave live runs' and other hosts' (a shared disk) be.
WORK_PREFIX: Final = "fp-spans-"
_HOST: Final = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_WORK_NAME: Final = re.compile(rf"^{WORK_PREFIX}(?P<host>[0-9a-f]{{8}})-(?P<pid>[0-9]+)-")


def sweep_dead_staging(parent: str) -> list[str]:
    """Removes the working folders under ``parent`` of this host's span staging whose process is gone; returns
    their paths."""
    try:
        names = os.listdir(parent)
    except OSError:
        return []  # no folder yet, or not listable: making the working folder will say
    removed: list[str] = []
    for name in names:
        match = _WORK_NAME.match(name)
        if match is None or match["host"] != _HOST or int(match["pid"]) == os.getpid():
            continue
        if not process_is_alive(int(match["pid"])):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
            removed.append(os.path.join(parent, name))
    return removed


def staging_folder(parent: str | None) -> tempfile.TemporaryDirectory[str]:
    """A working folder for staged span tables under ``parent`` (the system's temporary folder when None), named
    for :func:`sweep_dead_staging`, which runs first. A folder that cannot be removed at the end is left rather
    than failing a run that is done."""
    parent = parent or tempfile.gettempdir()
    sweep_dead_staging(parent)
    return tempfile.TemporaryDirectory(prefix=f"{WORK_PREFIX}{_HOST}-{os.getpid()}-", dir=parent,
                                       ignore_cleanup_errors=True)


def export_kind(path: str) -> str:
    """``otlp``, ``span-table`` or ``table`` (:data:`TABLE`)."""
    suffix = os.path.splitext(path.removesuffix(".gz").removesuffix(".GZ"))[1].lower()
    if suffix not in _TABLE_ONLY and is_otlp_export(path):
        return "otlp"
    if compression_of(path) is not None:
        refuse_compressed([path])
    if input_format(path) == PARQUET:
        if suffix not in _TABLE_ONLY and suffix:
            _refuse_unknown(path)
        if is_span_table(file_schema(path).names()):
            return "span-table"
    return TABLE


def _refuse_unknown(path: str) -> None:
    """A file named with a suffix of no table (``traces.json``) that is no OTLP export either: Parquet is what
    it would otherwise be read as, so say what was expected instead of a Parquet reader's complaint."""
    with Place.of(path).open_input_stream() as raw:
        if raw.read(4) == b"PAR1":
            return
    raise InputError(
        f"{path!r} is neither a table (Parquet, JSON Lines *.jsonl / *.ndjson, CSV) nor a span export (JSON Lines of "
        "OTLP ExportTraceServiceRequest, as the OpenTelemetry Collector's file exporter writes): export it as one "
        "of those"
    )


def _pieces(path: str, kind: str, count: SpanCount) -> Iterator[list[Span]]:
    if kind == "otlp":
        yield from otlp_spans(path, _PIECE_ROWS, count.skipped_lines)
    else:
        first = 1  # rows are named by their number in the file, whichever chunk holds them
        for chunk in iter_chunks([path], _PIECE_ROWS):
            yield table_spans(chunk, path, first)
            first += chunk.height


def stage_spans(pieces: Iterable[list[Span]], name: str, workdir: str, count: SpanCount) -> str:
    """The conversation table of the spans of ``pieces``, written under ``workdir``: the spans go to a facts
    file piece by piece (bounded memory), and the join of each LLM span with its trace's context spans is
    polars' streaming engine's."""
    stem = f"{len(os.listdir(workdir)):04d}-{name or 'spans'}"
    facts_path = os.path.join(workdir, f"{stem}.facts.parquet")
    with pq.ParquetWriter(facts_path, pl.DataFrame(schema=FACTS_SCHEMA).to_arrow().schema) as writer:
        for piece in pieces:
            writer.write_table(span_facts(piece, count).to_arrow())
    target = os.path.join(workdir, f"{stem}.conversations.parquet")
    conversations(pl.scan_parquet(facts_path)).sink_parquet(target)
    count_copies(pl.scan_parquet(facts_path), count)
    os.remove(facts_path)
    unjudged = pl.scan_parquet(target).select(pl.col(NOTHING_TO_JUDGE).is_not_null().sum()).collect().item()
    count.nothing_to_judge += int(unjudged)
    return target


def stage_export(path: str, kind: str, workdir: str, count: SpanCount) -> str:
    """The conversation table of the span export ``path`` of ``kind`` (:func:`export_kind`), written under
    ``workdir`` and named after the export."""
    return stage_spans(_pieces(path, kind, count), os.path.basename(path).split(".")[0], workdir, count)


def landed_spans(path: str, fingerprint: str, cache: str) -> str | None:
    """The conversation table of the landing file ``path`` when it is a span export (None when it is a table),
    staged once per ``fingerprint`` (path, time, size) under the local folder ``cache``: every process of a
    day (each step, each machine) finds or makes the same file, written whole under a temporary name first."""
    kind = export_kind(path)
    if kind == TABLE:
        return None
    target = os.path.join(cache, hashlib.sha256(fingerprint.encode()).hexdigest()[:32] + ".parquet")
    if os.path.exists(target):
        return target
    os.makedirs(cache, exist_ok=True)
    with staging_folder(cache) as work:
        made = stage_export(path, kind, work, SpanCount())
        os.replace(made, target)
    return target


def phoenix_project(spec: str) -> tuple[str, str, datetime | None, datetime | None]:
    """The endpoint, project and time bounds a Phoenix input names: ``phoenix+http(s)://HOST[:PORT][/PREFIX]/
    projects/NAME`` with optional ``start`` and ``end`` (ISO dates or times; a date is its midnight in UTC; end
    exclusive). Its spans' readers and ``review import``'s annotations read it alike."""
    parts = urlsplit(spec)
    prefix, marker, project = parts.path.rpartition("/projects/")
    if not marker or not project.strip("/"):
        raise InputError(f"{scrubbed(spec)!r}: a Phoenix input names its project: "
                         "phoenix+http://127.0.0.1:6006/projects/NAME?start=2026-12-04&end=2026-12-05")
    query = parse_qs(parts.query)
    scheme = parts.scheme.removeprefix("phoenix+")
    return (f"{scheme}://{parts.netloc}{prefix}", unquote(project.strip("/")), _when(query, "start", spec),
            _when(query, "end", spec))


def phoenix_pieces(spec: str, api_key: str | None, window: tuple[datetime, datetime] | None = None,
                   ) -> Iterator[list[Span]]:
    """The spans a Phoenix input names (:func:`phoenix_project`), a page at a time, or those of ``window`` (the
    Dagster landing's day)."""
    endpoint, project, start, end = phoenix_project(spec)
    with PhoenixClient(endpoint, api_key) as client:
        start, end = window or (start, end)
        yield from client.spans(project, start, end)


def _when(query: dict[str, list[str]], name: str, spec: str) -> datetime | None:
    if name not in query:
        return None
    raw = query[name][-1]
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"{scrubbed(spec)!r}: {name}={raw!r} is no ISO date or time (2026-12-04, "
                         "2026-12-04T06:00:00Z)") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def stage_phoenix_day(spec: str, window: tuple[datetime, datetime], target: str, api_key: str | None) -> SpanCount:
    """The conversation table of a Phoenix project's spans in ``window``, written whole to ``target`` (pulled
    anew each time: spans arrive late)."""
    count = SpanCount()
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with staging_folder(os.path.dirname(target)) as work:
        os.replace(stage_spans(phoenix_pieces(spec, api_key, window), "phoenix", work, count), target)
    return count


def frame_spans(frame: pl.DataFrame) -> Iterable[Span] | None:
    """The spans of ``frame`` when it is a table of spans (the Python API's input), else None."""
    return table_spans(frame) if is_span_table(frame.columns) else None
