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
import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import polars as pl

from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.traces.attributes import Flat, flatten, otlp_attributes
from faithfulness_pipeline.traces.export_lines import (
    BROKEN_GZIP,
    MAX_LINE_BYTES,
    broken_gzip,
    export_lines,
    open_export,
)

SPAN_SCHEMA: Final = pl.Schema({
    "trace_id": pl.String(), "span_id": pl.String(), "parent_id": pl.String(), "name": pl.String(),
    "kind": pl.String(), "start_time": pl.Datetime("us", "UTC"), "end_time": pl.Datetime("us", "UTC"),
    "status_code": pl.String(), "attributes": pl.String(),
})
#: Columns by which a table is known as spans: the canonical names, or Phoenix's.
_CANONICAL: Final = frozenset({"trace_id", "span_id", "name"})
_PHOENIX: Final = frozenset({"context.trace_id", "context.span_id", "name"})
_HEX: Final = frozenset("0123456789abcdefABCDEF")
#: How far into a file the sniffer looks for the first line of an OTLP export.
_SNIFF_BYTES: Final = 1 << 16
#: The requests of the other signals, by their top key. A Collector whose pipelines share one file exporter
#: writes them into the traces' file: such lines are skipped and counted, never read as spans.
OTHER_SIGNALS: Final = {"resourceLogs": "logs", "resourceMetrics": "metrics", "resourceProfiles": "profiles"}
_SIGNAL_KEYS: Final = ("resourceSpans", *OTHER_SIGNALS)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
#: The last nanosecond a datetime holds (the end of year 9999): a later start is no time, refused by line.
_LAST: Final = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
_MAX_NANOS: Final = (_LAST - _EPOCH) // timedelta(microseconds=1) * 1_000
_NANOS_TEXT: Final = re.compile(r"[0-9]{1,21}")

#: A span event: its name and its attributes (flattened).
Event = tuple[str, Flat]


@dataclass(frozen=True, slots=True)
class Span:
    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start: datetime | None
    attributes: Flat  # flattened: dotted keys
    events: tuple[Event, ...] = ()  # older instrumentations put the answer in events (traces.reading)


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


def is_otlp_export(path: str) -> bool:
    """Whether ``path`` holds JSON Lines of OTLP requests: its first line has ``resourceSpans`` (or the key of
    another signal, which a Collector may write into the same file)."""
    try:
        with open_export(path) as (stream, packed):
            first = b""
            try:
                while not first:
                    line = stream.readline(_SNIFF_BYTES)
                    if not line:
                        return False
                    first = line.strip()
            except BROKEN_GZIP as why:
                if packed:  # cut within its first line: say so, rather than call it a compressed table
                    raise broken_gzip(path, 0, why) from None
                raise
    except OSError:
        return False
    if not first.startswith(b"{"):
        return False
    try:
        head = json.loads(first)
    except (ValueError, RecursionError):
        # a first line longer than the sniff: its key is near the start
        return any(b'"%s"' % key.encode() in first[:200] for key in _SIGNAL_KEYS)
    return isinstance(head, Mapping) and any(key in head for key in _SIGNAL_KEYS)


def _nanos(raw: Any) -> datetime | None:
    """An OTLP time (nanoseconds since 1970, a JSON number or, as protobuf's JSON mapping writes 64-bit
    integers, text); absent or 0 is no time. Anything else, or a time outside 1970..9999, is a ValueError."""
    if raw is None or raw == "" or (raw in (0, "0") and not isinstance(raw, bool)):
        return None
    if isinstance(raw, bool) or not (isinstance(raw, int) or (isinstance(raw, str) and _NANOS_TEXT.fullmatch(raw))):
        raise ValueError(f"startTimeUnixNano {str(raw)[:40]!r} is not a whole number of nanoseconds")
    nanos = int(raw)
    if not 0 < nanos <= _MAX_NANOS:
        raise ValueError(f"startTimeUnixNano {str(raw)[:40]!r} is not a time between 1970 and the year 9999")
    return _EPOCH + timedelta(microseconds=nanos // 1000)


def _objects(value: Any, what: str) -> list[Mapping[str, Any]]:
    """``value`` as a list of JSON objects, or a ValueError naming ``what`` is not one."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise ValueError(f"{what} is not a list of objects")
    return value


def _signal(request: Any) -> str:
    """``traces`` for a trace request, the name of another signal for its request, ``empty`` for ``{}`` (an
    empty request of any signal, as protobuf's JSON mapping writes it); any other line is a ValueError."""
    if not isinstance(request, Mapping):
        raise ValueError("the line is not a JSON object")
    if "resourceSpans" in request:
        return "traces"
    for key, name in OTHER_SIGNALS.items():
        if key in request:
            return name
    if not request:
        return "empty"
    raise ValueError(f"the line holds none of {', '.join(_SIGNAL_KEYS)} (its keys: {sorted(request)[:5]})")


def _text(raw: Mapping[str, Any], key: str, what: str) -> str | None:
    value = raw.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{what}: {key} is not text: {repr(value)[:40]}")
    return value


def _event(raw: Mapping[str, Any]) -> Event:
    name = _text(raw, "name", "an event") or ""
    return name, flatten(otlp_attributes(raw.get("attributes")))


def _span(raw: Mapping[str, Any]) -> Span:
    """One OTLP span, every field it is read for checked for its type (a ValueError says which)."""
    name = _text(raw, "name", "a span") or ""
    trace_text, own_text = _text(raw, "traceId", f"span {name!r}"), _text(raw, "spanId", f"span {name!r}")
    trace, own = span_id_text(trace_text), span_id_text(own_text)
    if trace is None or own is None:
        raise ValueError(f"span {name!r} has no traceId or spanId")
    try:
        parent = span_id_text(_text(raw, "parentSpanId", "the span"))
        start = _nanos(raw.get("startTimeUnixNano"))
        attributes = flatten(otlp_attributes(raw.get("attributes")))
        events = tuple(_event(event) for event in _objects(raw.get("events"), "events"))
    except ValueError as why:
        raise ValueError(f"span {name!r} ({own}): {why}") from None
    return Span(trace, own, parent, name, start, attributes, events)


def _request_spans(request: Mapping[str, Any]) -> Iterator[Span]:
    for resource in _objects(request.get("resourceSpans"), "resourceSpans"):
        # instrumentationLibrarySpans: the name of scopeSpans before OTLP 0.15, still written by old exporters
        scopes = resource.get("scopeSpans") or resource.get("instrumentationLibrarySpans")
        for scope in _objects(scopes, "scopeSpans"):
            for span in _objects(scope.get("spans"), "spans"):
                yield _span(span)


def otlp_spans(path: str, per_piece: int = 5_000, skipped: Counter[str] | None = None,
               max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[list[Span]]:
    """The spans of an OTLP JSON Lines export, at most about ``per_piece`` at a time. A line that is not an
    OTLP request (not JSON, JSON of no OTLP shape, a value of the wrong type, nested too deep, a time that is
    none) is refused naming the file, the line and what is wrong there: a damaged export is not read as a
    shorter one. Requests of the other signals (logs, metrics) and empty ones are counted in ``skipped`` by
    signal (the run's summary names them) and hold no spans."""
    piece: list[Span] = []
    for number, line in export_lines(path, max_line_bytes):
        try:
            request = json.loads(line.decode("utf-8"))
            signal = _signal(request)
            if signal == "traces":
                piece.extend(_request_spans(request))
            elif skipped is not None:
                skipped[signal] += 1
        except (ValueError, RecursionError) as why:  # json's and utf-8's errors are ValueErrors too
            what = "it nests deeper than JSON can be read" if isinstance(why, RecursionError) else str(why)
            raise InputError(f"{path}: line {number} is no OTLP trace request ({what}), so this export is cut or "
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
    if isinstance(whole, str):
        text = whole
        try:
            whole = json.loads(text) if text.strip() else None
        except ValueError:
            raise ValueError(f"attributes is not JSON: {text[:60]!r}") from None
    if whole is not None and not isinstance(whole, Mapping):
        raise ValueError(f"attributes is not a JSON object: {repr(whole)[:60]}")
    if whole is not None:
        flatten(whole, "", flat)
    for name, value in row.items():
        if name.startswith("attributes.") and value is not None:
            flatten(value, name.removeprefix("attributes."), flat)
    return flat


def _events_of(raw: Any) -> tuple[Event, ...]:
    """Phoenix's ``events`` column (a list of events, or its JSON text), each with a name and attributes."""
    if isinstance(raw, str):
        raw = json.loads(raw) if raw.strip() else None
    out: list[Event] = []
    for event in _objects(raw, "events"):
        attributes = event.get("attributes")
        if isinstance(attributes, str):
            attributes = json.loads(attributes) if attributes.strip() else None
        if attributes is not None and not isinstance(attributes, Mapping):
            raise ValueError(f"an event's attributes are not an object: {repr(attributes)[:60]}")
        out.append((str(event.get("name") or ""), flatten(attributes or {})))
    return tuple(out)


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if value is None or value == "":
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None:
        raise ValueError(f"start_time {str(value)[:40]!r} is not a time (a timestamp, or ISO 8601 text)")
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def table_spans(frame: pl.DataFrame, where: str = "the span table", first_row: int = 1) -> list[Span]:
    """The spans of a table of spans (canonical or Phoenix's shape); rows without ids are no spans. A cell that
    cannot be read (a start_time that is no time, attributes that are no JSON object) raises
    :class:`InputError` naming ``where`` and the row (counted from ``first_row``)."""
    out: list[Span] = []
    for number, row in enumerate(frame.iter_rows(named=True), first_row):
        trace = span_id_text(row.get("trace_id", row.get("context.trace_id")))
        own = span_id_text(row.get("span_id", row.get("context.span_id")))
        if trace is None or own is None:
            continue
        try:
            start = _time(row.get("start_time"))
            attributes, events = _attributes_of(row), _events_of(row.get("events"))
        except (ValueError, RecursionError) as why:
            what = "a cell nests deeper than JSON can be read" if isinstance(why, RecursionError) else str(why)
            raise InputError(f"{where}: row {number} (span {trace}/{own}) cannot be read: {what}") from None
        parent = row.get("parent_id", row.get("parent_span_id"))
        out.append(Span(trace, own, span_id_text(parent), str(row.get("name") or ""), start, attributes, events))
    return out
