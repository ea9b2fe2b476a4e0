"""Span exports among a run's inputs, turned into conversation tables before the run reads them.

``stage_inputs`` resolves an input as ``tables.inputs`` does and looks at each file: an OpenTelemetry
Collector export (JSON Lines of OTLP trace requests, gzip or not, found by its first line) or a Parquet
table of spans (found by its columns) is read piece by piece into span facts on disk, then joined into
conversation rows (``traces.conversations``) written as Parquet in the run's working folder; every other
file is handed on as it is. A compressed file that is no span export is refused as tables refuse it."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

import polars as pl
import pyarrow.parquet as pq

from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.tables.inputs import PARQUET, compression_of, input_format, refuse_compressed, resolve_inputs
from faithfulness_pipeline.tables.read import file_schema, iter_chunks
from faithfulness_pipeline.tables.storage import Place
from faithfulness_pipeline.traces.conversations import FACTS_SCHEMA, SpanCount, conversations, span_facts
from faithfulness_pipeline.traces.spans import Span, is_otlp_export, is_span_table, otlp_spans, table_spans

#: Suffixes a table is read by without looking inside: a Parquet or CSV file is never an OTLP export.
_TABLE_ONLY: Final = frozenset({".parquet", ".csv"})
_PIECE_ROWS: Final = 5_000


@dataclass(slots=True)
class StagedInputs:
    """The files a run reads (span exports replaced by their conversation tables) and what the spans held
    (None when no input was a span export)."""

    paths: list[str]
    spans: SpanCount | None = None
    staged: dict[str, str] = field(default_factory=dict)  # conversation table -> the span export it came from


def _kind_of(path: str) -> str:
    """``otlp``, ``span-table`` or ``table``."""
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
    return "table"


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


def _pieces(path: str, kind: str) -> Iterator[list[Span]]:
    if kind == "otlp":
        yield from otlp_spans(path, _PIECE_ROWS)
    else:
        for chunk in iter_chunks([path], _PIECE_ROWS):
            yield table_spans(chunk)


def stage_spans(path: str, kind: str, workdir: str, count: SpanCount) -> str:
    """The conversation table of the span file ``path``, written under ``workdir``: the spans go to a facts
    file piece by piece (bounded memory), and the join of each LLM span with its trace's context spans is
    polars' streaming engine's."""
    stem = f"{len(os.listdir(workdir)):04d}-{os.path.basename(path).split('.')[0] or 'spans'}"
    facts_path = os.path.join(workdir, f"{stem}.facts.parquet")
    with pq.ParquetWriter(facts_path, pl.DataFrame(schema=FACTS_SCHEMA).to_arrow().schema) as writer:
        for piece in _pieces(path, kind):
            writer.write_table(span_facts(piece, count).to_arrow())
    target = os.path.join(workdir, f"{stem}.conversations.parquet")
    conversations(pl.scan_parquet(facts_path)).sink_parquet(target)
    os.remove(facts_path)
    return target


def stage_inputs(spec: str, workdir: str) -> StagedInputs:
    """The files of ``spec`` for a run, span exports staged as conversation tables under ``workdir``."""
    staged = StagedInputs([])
    for path in resolve_inputs(spec, compressed=True):
        kind = _kind_of(path)
        if kind == "table":
            staged.paths.append(path)
            continue
        staged.spans = staged.spans or SpanCount()
        target = stage_spans(path, kind, workdir, staged.spans)
        staged.staged[target] = path
        staged.paths.append(target)
    return staged


def frame_spans(frame: pl.DataFrame) -> Iterable[Span] | None:
    """The spans of ``frame`` when it is a table of spans (the Python API's input), else None."""
    return table_spans(frame) if is_span_table(frame.columns) else None
