"""Scores back on the spans they judged: OpenTelemetry GenAI evaluation events to an OTLP endpoint
(``traces.otel_events``) and span annotations to Phoenix (``traces.phoenix``). Each exists where the traces
settings name its place (``FP_OTEL_ENDPOINT``, ``FP_PHOENIX_ENDPOINT``). Each is written on its own and
reports what it could not deliver instead of raising, so one that fails never keeps the other from running;
what the settings and the input's columns alone rule out is checked before any judge request (``check``)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Final

import polars as pl

from faithfulness_pipeline.core.errors import FaithfulnessPipelineError
from faithfulness_pipeline.outputs.kinds import Delivered, OutputContext, Sent
from faithfulness_pipeline.settings.traces import TraceExportSettings
from faithfulness_pipeline.traces.evaluations import evaluation_columns


def _send_events(chunks: Iterable[pl.DataFrame], traces: TraceExportSettings, context: OutputContext) -> Delivered:
    from faithfulness_pipeline.traces.otel_events import send_evaluation_events

    assert traces.otel_endpoint is not None
    try:
        sent = send_evaluation_events(chunks, traces.otel_endpoint, threshold=context.hallucination_threshold,
                                      scale=context.scale, timeout_s=traces.otel_timeout_s)
    except FaithfulnessPipelineError as exc:  # reported, so that the other write-backs still run
        return Delivered(f"evaluation events: none sent: {exc}", True, {"error": str(exc)})
    return Delivered(sent.line(), bool(sent.failed), {
        "rows": sent.rows, "events": sent.events, "events_delivered": sent.delivered,
        "rows_without_span_ids": sent.without_ids, "rows_with_ids_not_hex": sent.bad_ids, "endpoint": sent.endpoint})


def _check_events(columns: list[str], traces: TraceExportSettings) -> None:
    from faithfulness_pipeline.traces.otel_events import check_columns, logs_url

    assert traces.otel_endpoint is not None
    logs_url(traces.otel_endpoint)
    check_columns(columns)


def _annotate(chunks: Iterable[pl.DataFrame], traces: TraceExportSettings, context: OutputContext) -> Delivered:
    from faithfulness_pipeline.judging.catalog import baseline_judges
    from faithfulness_pipeline.traces.phoenix import PHOENIX_KEY_ENV, PhoenixClient

    assert traces.phoenix_endpoint is not None
    code = baseline_judges()
    try:
        with PhoenixClient(traces.phoenix_endpoint, os.environ.get(PHOENIX_KEY_ENV)) as phoenix:
            sent = phoenix.annotate(chunks, threshold=context.hallucination_threshold, scale=context.scale,
                                    kind_of=lambda model: "CODE" if model in code else "LLM")
    except FaithfulnessPipelineError as exc:  # reported, so that the other write-backs still run
        return Delivered(f"phoenix annotations: none written: {exc}", True, {"error": str(exc)})
    # Phoenix takes a page (a JSON object answered) or refuses it: what was counted was delivered.
    return Delivered(sent.line(), sent.error is not None, {
        "rows": sent.rows, "annotations": sent.annotations, "rows_without_span_ids": sent.without_ids,
        "endpoint": sent.endpoint})


def _check_annotations(columns: list[str], traces: TraceExportSettings) -> None:
    from faithfulness_pipeline.traces.phoenix import check_columns, check_endpoint

    assert traces.phoenix_endpoint is not None
    check_endpoint(traces.phoenix_endpoint)
    check_columns(columns)


EVALUATION_EVENTS: Final = Sent(
    name="evaluation_events",
    description="The scores sent back to the spans they judged: one gen_ai.evaluation.result event per scorer for "
    "every judged row made of spans, to the OTLP endpoint of the traces settings (docs/traces.md).",
    kinds=frozenset({"opentelemetry"}),
    revision="events-1",
    enabled=lambda traces: traces.otel_endpoint is not None,
    named_by="`--otel-endpoint` (`FP_OTEL_ENDPOINT`)",
    unset="no OTLP endpoint: set FP_OTEL_ENDPOINT (or the traces resource's otel_endpoint)",
    reads=lambda present: [c for c in evaluation_columns(present) if c in present],
    send=_send_events,
    check=_check_events,
)

PHOENIX_ANNOTATIONS: Final = Sent(
    name="phoenix_annotations",
    description="The scores as Phoenix span annotations (hallucination, faithfulness: score, label, explanation), "
    "updated in place on re-runs, on the Phoenix of the traces settings (docs/traces.md).",
    kinds=frozenset({"phoenix"}),
    revision="annotations-1",
    enabled=lambda traces: traces.phoenix_endpoint is not None,
    named_by="`--phoenix-endpoint` (`FP_PHOENIX_ENDPOINT`)",
    unset="no Phoenix: set FP_PHOENIX_ENDPOINT (or the traces resource's phoenix_endpoint)",
    reads=lambda present: [c for c in (*evaluation_columns(present), "judge_model") if c in present],
    send=_annotate,
    check=_check_annotations,
)
