"""Scores sent back to the spans they judged, as OpenTelemetry GenAI evaluation events: log records named
``gen_ai.evaluation.result`` whose trace and span ids are the evaluated span's, through the OpenTelemetry
SDK's OTLP/HTTP log exporter to the endpoint the user names (a Collector, or any OTLP backend). The exporter is
called synchronously, a batch at a time, and only what it reports delivered is counted: no queue drops events
behind our back when the endpoint is slow.

The SDK is imported by this module alone, which the entry points import only when events are to be sent.
It is used with a logger provider of this call's own (never the process's global one, never an exit
hook) and shut down before returning. Headers (an API key of the backend) are read by the exporter from
``OTEL_EXPORTER_OTLP_LOGS_HEADERS`` / ``OTEL_EXPORTER_OTLP_HEADERS`` as usual, never by us: they cannot reach
a log line or an exception of ours."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import urlsplit

import polars as pl
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider, LogRecordProcessor
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import Resource

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.traces.evaluations import COLUMNS, EVENT_NAME, evaluation_columns, evaluations
from faithfulness_pipeline.traces.urls import http_base, shown

log = logging.getLogger(__name__)

_LOGS_PATH: Final = "/v1/logs"
_SCOPE: Final = "faithfulness_pipeline"
#: Events a request carries (the SDK's own batch size): one request's wait bounds memory and latency.
BATCH: Final = 512
_HEX: Final = frozenset("0123456789abcdef")


@dataclass(slots=True)
class EventsSent:
    """What a send did: rows read, events made, those the endpoint acknowledged (a batch counts when its export
    returned SUCCESS, nothing else does), rows without span ids (nothing to put an event on) and rows whose ids
    are not OpenTelemetry's hex (a span table's own ids, say: skipped, as no span could be found by them)."""

    endpoint: str
    rows: int = 0
    events: int = 0
    delivered: int = 0
    without_ids: int = 0
    bad_ids: int = 0

    @property
    def failed(self) -> int:
        """Events made but not acknowledged: refused, lost, or never tried after a refused batch."""
        return self.events - self.delivered

    def line(self) -> str:
        failed = f", {self.failed} not delivered (see the log)" if self.failed else ""
        missing = f"; {self.without_ids} row(s) have no trace_id/span_id" if self.without_ids else ""
        bad = (f"; {self.bad_ids} row(s) have ids that are not OpenTelemetry hex ids (32 and 16 hex digits): "
               "skipped") if self.bad_ids else ""
        return f"evaluation events: {self.delivered} of {self.events} sent to {self.endpoint}{failed}{missing}{bad}"


def logs_url(endpoint: str) -> str:
    """The OTLP/HTTP logs URL of ``endpoint``: a base (``http://collector:4318``) gets ``/v1/logs``, as the
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` convention has it; a URL already ending in it is kept."""
    base = http_base(endpoint, "OTLP endpoint", "http://127.0.0.1:4318")
    parts = urlsplit(base)
    if parts.username is not None or parts.password is not None or parts.query:
        # The exporter names the URL in log lines of its own (a refused connection quotes its path and query),
        # which no scrubber of ours sees: a key has no place in it.
        raise ConfigError(f"the OTLP endpoint {shown(base)!r} carries user info or a query: put the backend's key "
                          "in OTEL_EXPORTER_OTLP_HEADERS (e.g. x-api-key=...), not in the URL")
    return base if base.endswith(_LOGS_PATH) else base + _LOGS_PATH


def check_columns(columns: Iterable[str]) -> None:
    """A :class:`ConfigError` when a scored table of ``columns`` cannot give events (no span ids)."""
    missing = [c for c in COLUMNS if c not in set(columns)]
    if missing:
        raise ConfigError(f"the scored table has no {', '.join(missing)} column(s): evaluation events need "
                          "rows made of spans (traces as input, docs/traces.md)")


class _Batches(LogRecordProcessor):
    """Exports what is emitted in batches of :data:`BATCH`, synchronously, and counts what the endpoint
    acknowledged. Unlike the SDK's BatchLogRecordProcessor, whose queue drops records when the endpoint is
    slower than we are (a log line, and a count of our own that believed them sent), the caller waits for each
    batch: back-pressure instead of loss. After a batch fails, no more are tried (a down endpoint would cost
    each its timeout) and the rest count as not delivered."""

    def __init__(self, exporter: LogRecordExporter, sent: EventsSent) -> None:
        self._exporter = exporter
        self._sent = sent
        self._pending: list[Any] = []
        self.refused = False

    def on_emit(self, log_record: Any) -> None:
        self._pending.append(log_record)
        if len(self._pending) >= BATCH:
            self.flush()

    def flush(self) -> None:
        batch, self._pending = self._pending, []
        if not batch or self.refused:
            return
        if self._exporter.export(batch) == LogRecordExportResult.SUCCESS:
            self._sent.delivered += len(batch)
        else:
            self.refused = True

    def shutdown(self) -> None:
        self._exporter.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        self.flush()
        return not self.refused


def _context(row: dict[str, Any]) -> Context | None:
    """The evaluated span as a parent context, or None when its ids are not OpenTelemetry's hex ids."""
    trace_id, span_id = str(row[S.TRACE_ID]).lower(), str(row[S.SPAN_ID]).lower()
    if (len(trace_id), len(span_id)) != (32, 16) or not set(trace_id + span_id) <= _HEX:
        return None
    span_context = trace.SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True,
                                     trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))
    return None if not span_context.is_valid else trace.set_span_in_context(trace.NonRecordingSpan(span_context))


def send_evaluation_events(
    frames: Iterable[pl.DataFrame], endpoint: str, *, threshold: float, scale: float, timeout_s: float = 30.0,
) -> EventsSent:
    """Sends one ``gen_ai.evaluation.result`` event per scorer for every judged row of ``frames`` (scored
    tables, chunk by chunk: memory holds one chunk and one batch) to ``endpoint``."""
    url = logs_url(endpoint)
    sent = EventsSent(endpoint=shown(url))
    provider = LoggerProvider(resource=Resource.create({"service.name": "faithfulness-pipeline"}),
                              shutdown_on_exit=False)
    batches = _Batches(OTLPLogExporter(endpoint=url, timeout=timeout_s), sent)
    provider.add_log_record_processor(batches)
    logger = provider.get_logger(_SCOPE)
    try:
        for frame in frames:
            check_columns(frame.columns)
            for row in frame.select(evaluation_columns(frame.columns)).iter_rows(named=True):
                sent.rows += 1
                if not row[S.TRACE_ID] or not row[S.SPAN_ID]:
                    sent.without_ids += 1
                    continue
                context = _context(row)
                if context is None:
                    sent.bad_ids += 1
                    continue
                now = int(datetime.now(UTC).timestamp() * 1e9)
                for evaluation in evaluations(row, threshold, scale):
                    logger.emit(timestamp=now, context=context, event_name=EVENT_NAME,
                                attributes=evaluation.attributes())
                    sent.events += 1
        batches.flush()
    finally:
        provider.shutdown()
    if sent.failed:
        log.warning("%s", sent.line())
    return sent
