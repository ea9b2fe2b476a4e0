"""Spans as they come: an OpenTelemetry Collector's file export (JSON Lines of OTLP
``ExportTraceServiceRequest``, gzip or not) or a table of spans (Phoenix's spans dataframe, or the
canonical frame below), each read into :class:`Span` records, in pieces of bounded size.

The canonical span frame (what a table of spans may hold, and what other sources produce):
``trace_id``, ``span_id`` (lowercase hex), ``parent_id`` (null for a root), ``name``, ``kind``,
``start_time`` (UTC), ``end_time``, ``status_code`` and ``attributes`` (a JSON object, flattened keys or
nested). Phoenix's frame names them ``context.trace_id``, ``context.span_id``, ``span_kind`` and holds the
attributes either in one ``attributes`` column or in one ``attributes.<name>`` column each."""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any, Final

import polars as pl

from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.tables.storage import Place
from faithfulness_pipeline.traces.attributes import Flat, flatten, otlp_attributes

SPAN_SCHEMA: Final = pl.Schema({
    "trace_id": pl.String(), "span_id": pl.String(), "parent_id": pl.String(), "name": pl.String(),
    "kind": pl.String(), "start_time": pl.Datetime("us", "UTC"), "end_time": pl.Datetime("us", "UTC"),
    "status_code": pl.String(), "attributes": pl.String(),
})
#: Columns by which a table is known as spans: the canonical names, or Phoenix's.
_CANONICAL: Final = frozenset({"trace_id", "span_id", "name"})
_PHOENIX: Final = frozenset({"context.trace_id", "context.span_id", "name"})
_GZIP_MAGIC: Final = b"\x1f\x8b"
_HEX: Final = frozenset("0123456789abcdefABCDEF")
#: How far into a file the sniffer looks for the first line of an OTLP export.
_SNIFF_BYTES: Final = 1 << 16


@dataclass(frozen=True, slots=True)
class Span:
    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start: datetime | None
    attributes: Flat  # flattened: dotted keys


def span_id_text(raw: Any) -> str | None:
    """A trace or span id as lowercase hex: OTLP JSON writes hex (32 and 16 digits), protobuf's JSON mapping
    base64 (of 16 and 8 bytes); anything else is kept as it is written."""
    if raw is None or raw == "":
        return None
    text = str(raw).strip().removeprefix("0x")
    if len(text) in (16, 32) and all(c in _HEX for c in text):
        return text.lower()
    try:
        decoded = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return text
    return decoded.hex() if len(decoded) in (8, 16) else text


def _open_text(path: str) -> IO[str]:
    place = Place.of(path)
    # pyarrow's stream already inflates a file named *.gz; gzip under another name is found by its content.
    with place.open_input_stream() as probe:
        packed = probe.read(2) == _GZIP_MAGIC
    stream = place.open_input_stream()
    return io.TextIOWrapper(gzip.GzipFile(fileobj=stream) if packed else stream, encoding="utf-8")


def is_otlp_export(path: str) -> bool:
    """Whether ``path`` holds JSON Lines of OTLP trace requests (its first line has ``resourceSpans``)."""
    try:
        with _open_text(path) as text:
            first = text.readline(_SNIFF_BYTES).strip()
            while first == "":
                line = text.readline(_SNIFF_BYTES)
                if not line:
                    return False
                first = line.strip()
    except (OSError, UnicodeDecodeError, EOFError):
        return False
    if not first.startswith("{"):
        return False
    try:
        return isinstance(json.loads(first), Mapping) and "resourceSpans" in json.loads(first)
    except ValueError:
        return '"resourceSpans"' in first[:200]  # a first line longer than the sniff: its key is near the start


def _nanos(raw: Any) -> datetime | None:
    if raw in (None, "", 0, "0"):
        return None
    return datetime.fromtimestamp(int(raw) / 1e9, tz=UTC)


def _objects(value: Any, what: str) -> list[Mapping[str, Any]]:
    """``value`` as a list of JSON objects, or a ValueError naming ``what`` is not one."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise ValueError(f"{what} is not a list of objects")
    return value


def _request_spans(request: Any) -> Iterator[Span]:
    if not isinstance(request, Mapping):
        raise ValueError("the line is not a JSON object")
    for resource in _objects(request.get("resourceSpans"), "resourceSpans"):
        # instrumentationLibrarySpans: the name of scopeSpans before OTLP 0.15, still written by old exporters
        scopes = resource.get("scopeSpans") or resource.get("instrumentationLibrarySpans")
        for scope in _objects(scopes, "scopeSpans"):
            for span in _objects(scope.get("spans"), "spans"):
                trace, own = span_id_text(span.get("traceId")), span_id_text(span.get("spanId"))
                if trace is None or own is None:
                    raise ValueError(f"span {span.get('name')!r} has no traceId or spanId")
                yield Span(trace, own, span_id_text(span.get("parentSpanId")), str(span.get("name") or ""),
                           _nanos(span.get("startTimeUnixNano")), flatten(otlp_attributes(span.get("attributes"))))


def otlp_spans(path: str, per_piece: int = 5_000) -> Iterator[list[Span]]:
    """The spans of an OTLP JSON Lines export, at most about ``per_piece`` at a time. A line that is not an
    OTLP request (not JSON, or JSON of another shape) is refused naming the file, the line and what is wrong
    there: a damaged export is not read as a shorter one."""
    piece: list[Span] = []
    with _open_text(path) as text:
        for number, line in enumerate(text, 1):
            if not line.strip():
                continue
            try:
                piece.extend(_request_spans(json.loads(line)))
            except ValueError as why:  # json's errors are ValueErrors too
                raise InputError(f"{path}: line {number} is no OTLP trace request ({why}), so this export is cut or "
                                 "damaged: re-export it (a Collector file exporter writes one JSON request per "
                                 "line)") from None
            if len(piece) >= per_piece:
                yield piece
                piece = []
    if piece:
        yield piece


def is_span_table(columns: Any) -> bool:
    """Whether a table with these column names is a table of spans (canonical or Phoenix's)."""
    names = set(columns)
    has_attributes = "attributes" in names or any(n.startswith("attributes.") for n in names)
    return (names >= _CANONICAL and has_attributes) or names >= _PHOENIX


def _attributes_of(row: Mapping[str, Any]) -> Flat:
    flat: Flat = {}
    whole = row.get("attributes")
    if isinstance(whole, str) and whole.strip():
        try:
            whole = json.loads(whole)
        except ValueError:
            whole = None
    if isinstance(whole, Mapping):
        flatten(whole, "", flat)
    for name, value in row.items():
        if name.startswith("attributes.") and value is not None:
            flatten(value, name.removeprefix("attributes."), flat)
    return flat


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str) and value:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def table_spans(frame: pl.DataFrame) -> list[Span]:
    """The spans of a table of spans (canonical or Phoenix's shape); rows without ids are no spans."""
    out: list[Span] = []
    for row in frame.iter_rows(named=True):
        trace = span_id_text(row.get("trace_id", row.get("context.trace_id")))
        own = span_id_text(row.get("span_id", row.get("context.span_id")))
        if trace is None or own is None:
            continue
        parent = row.get("parent_id", row.get("parent_span_id"))
        start = _time(row.get("start_time"))
        out.append(Span(trace, own, span_id_text(parent), str(row.get("name") or ""), start, _attributes_of(row)))
    return out
