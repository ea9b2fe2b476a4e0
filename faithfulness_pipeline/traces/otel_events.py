"""Scores sent back to the spans they judged, as OpenTelemetry GenAI evaluation events: log records named
``gen_ai.evaluation.result`` whose trace and span ids are the evaluated span's, through the OpenTelemetry
SDK's OTLP/HTTP log exporter to the endpoint the user names (a Collector, or any OTLP backend).

The SDK is imported by this module alone, which the entry points import only when events are to be sent.
It is used with a logger provider of this call's own (never the process's global one, never an exit
hook) and shut down before returning. Headers (an API key of the backend) are read by the exporter from
``OTEL_EXPORTER_OTLP_LOGS_HEADERS`` / ``OTEL_EXPORTER_OTLP_HEADERS`` as usual, never by us: they cannot reach
a log line or an exception of ours."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import polars as pl
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import Resource

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.traces.evaluations import COLUMNS, EVENT_NAME, evaluations
from faithfulness_pipeline.traces.urls import http_base, shown

log = logging.getLogger(__name__)

_LOGS_PATH: Final = "/v1/logs"
_SCOPE: Final = "faithfulness_pipeline"


@dataclass(slots=True)
class EventsSent:
    """What a send did: rows read, events handed to the exporter, those the endpoint refused or never got
    (counted per exported batch), and rows without span ids (nothing to put an event on)."""

    endpoint: str
    rows: int = 0
    events: int = 0
    failed: int = 0
    without_ids: int = 0

    def line(self) -> str:
        failed = f", {self.failed} not delivered (see the log)" if self.failed else ""
        missing = f"; {self.without_ids} row(s) have no trace_id/span_id" if self.without_ids else ""
        delivered = self.events - self.failed
        return f"evaluation events: {delivered} of {self.events} sent to {self.endpoint}{failed}{missing}"


def logs_url(endpoint: str) -> str:
    """The OTLP/HTTP logs URL of ``endpoint``: a base (``http://collector:4318``) gets ``/v1/logs``, as the
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` convention has it; a URL already ending in it is kept."""
    base = http_base(endpoint, "OTLP endpoint", "http://127.0.0.1:4318")
    return base if base.endswith(_LOGS_PATH) else base + _LOGS_PATH


class _Counting(LogRecordExporter):
    """The OTLP exporter, counting the records of every batch it could not deliver."""

    def __init__(self, url: str, timeout_s: float, sent: EventsSent) -> None:
        self.inner = OTLPLogExporter(endpoint=url, timeout=timeout_s)
        self.sent = sent
        self._lock = threading.Lock()

    def export(self, batch: Sequence[Any]) -> LogRecordExportResult:
        result = self.inner.export(batch)
        if result != LogRecordExportResult.SUCCESS:
            with self._lock:
                self.sent.failed += len(batch)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


def send_evaluation_events(
    frames: Iterable[pl.DataFrame], endpoint: str, *, threshold: float, scale: float, timeout_s: float = 30.0,
) -> EventsSent:
    """Sends one ``gen_ai.evaluation.result`` event per scorer for every judged row of ``frames`` (scored
    tables, chunk by chunk: memory holds one chunk and the exporter's queue) to ``endpoint``."""
    url = logs_url(endpoint)
    sent = EventsSent(endpoint=shown(url))
    provider = LoggerProvider(resource=Resource.create({"service.name": "faithfulness-pipeline"}),
                              shutdown_on_exit=False)
    provider.add_log_record_processor(BatchLogRecordProcessor(_Counting(url, timeout_s, sent)))
    logger = provider.get_logger(_SCOPE)
    try:
        for frame in frames:
            missing = [c for c in COLUMNS if c not in frame.columns]
            if missing:
                raise ConfigError(f"the scored table has no {', '.join(missing)} column(s): evaluation events need "
                                  "rows made of spans (traces as input, docs/traces.md)")
            for row in frame.select(COLUMNS).iter_rows(named=True):
                sent.rows += 1
                if not row[S.TRACE_ID] or not row[S.SPAN_ID]:
                    sent.without_ids += 1
                    continue
                context = trace.set_span_in_context(trace.NonRecordingSpan(trace.SpanContext(
                    int(row[S.TRACE_ID], 16), int(row[S.SPAN_ID], 16), is_remote=True,
                    trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))))
                now = int(datetime.now(UTC).timestamp() * 1e9)
                for evaluation in evaluations(row, threshold, scale):
                    logger.emit(timestamp=now, context=context, event_name=EVENT_NAME,
                                attributes=evaluation.attributes())
                    sent.events += 1
        provider.force_flush(int(timeout_s * 1000))
    finally:
        provider.shutdown()
    if sent.failed:
        log.warning("%s", sent.line())
    return sent
