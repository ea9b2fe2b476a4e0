"""Scores back on the spans they judged, one day of the scored table at a time: the ``evaluation_events`` asset
(OpenTelemetry GenAI evaluation events, ``traces.otel_events``) and the ``phoenix_annotations`` asset (span
annotations, ``traces.phoenix``). Each is part of the code location when its place is set as it loads
(``FP_OTEL_ENDPOINT``, ``FP_PHOENIX_ENDPOINT``), like the partitions; the launchpad may point a run elsewhere
through the ``traces`` resource."""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
import os

import dagster as dg

from faithfulness_pipeline.defs.names import ANNOTATIONS, ANNOTATIONS_REVISION, EVENTS, EVENTS_REVISION, GROUP, SCORED
from faithfulness_pipeline.defs.resources import ScoringResource, TracesResource
from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.traces.evaluations import COLUMNS
from faithfulness_pipeline.traces.phoenix import PHOENIX_KEY_ENV


def build_trace_assets(
    partitions: dg.PartitionsDefinition[str], traces: TracesResource
) -> list[dg.AssetsDefinition]:
    """The write-back assets of the places ``traces`` names."""
    return ([_events_asset(partitions)] if traces.otel_endpoint is not None else []) + (
        [_annotations_asset(partitions)] if traces.phoenix_endpoint is not None else [])


def _events_asset(partitions: dg.PartitionsDefinition[str]) -> dg.AssetsDefinition:
    @dg.asset(
        name=EVENTS,
        group_name=GROUP,
        code_version=EVENTS_REVISION,
        partitions_def=partitions,
        deps=[SCORED],
        kinds={"opentelemetry"},
        description="The day's scores sent back to the spans they judged: one gen_ai.evaluation.result event per "
        "scorer for every judged row made of spans, to the OTLP endpoint of the traces resource (docs/traces.md).",
    )
    def evaluation_events(
        context: dg.AssetExecutionContext, warehouse: WarehouseResource, scoring: ScoringResource,
        traces: TracesResource,
    ) -> dg.MaterializeResult:  # type: ignore[type-arg]
        from faithfulness_pipeline.traces.otel_events import send_evaluation_events

        if traces.otel_endpoint is None:
            raise dg.Failure("no OTLP endpoint: set FP_OTEL_ENDPOINT (or the traces resource's otel_endpoint)")
        day = context.partition_key
        present = [c for c in COLUMNS if c in warehouse.table_schema(SCORED, day)]
        sent = send_evaluation_events(warehouse.batches(SCORED, day, scoring.chunk_rows, present),
                                      traces.otel_endpoint, threshold=scoring.hallucination_threshold,
                                      scale=scoring.scale, timeout_s=traces.otel_timeout_s)
        context.log.info(sent.line())
        if sent.failed:
            raise dg.Failure(sent.line())
        return dg.MaterializeResult(metadata={"rows": sent.rows, "events": sent.events,
                                              "rows_without_span_ids": sent.without_ids, "endpoint": sent.endpoint})

    return evaluation_events


def _annotations_asset(partitions: dg.PartitionsDefinition[str]) -> dg.AssetsDefinition:
    @dg.asset(
        name=ANNOTATIONS,
        group_name=GROUP,
        code_version=ANNOTATIONS_REVISION,
        partitions_def=partitions,
        deps=[SCORED],
        kinds={"phoenix"},
        description="The day's scores as Phoenix span annotations (hallucination, faithfulness: score, label, "
        "explanation), updated in place on re-runs, on the Phoenix of the traces resource (docs/traces.md).",
    )
    def phoenix_annotations(
        context: dg.AssetExecutionContext, warehouse: WarehouseResource, scoring: ScoringResource,
        traces: TracesResource,
    ) -> dg.MaterializeResult:  # type: ignore[type-arg]
        from faithfulness_pipeline.judging.catalog import baseline_judges
        from faithfulness_pipeline.traces.phoenix import PhoenixClient

        if traces.phoenix_endpoint is None:
            raise dg.Failure("no Phoenix: set FP_PHOENIX_ENDPOINT (or the traces resource's phoenix_endpoint)")
        day = context.partition_key
        present = [c for c in (*COLUMNS, "judge_model") if c in warehouse.table_schema(SCORED, day)]
        code = baseline_judges()
        with PhoenixClient(traces.phoenix_endpoint, os.environ.get(PHOENIX_KEY_ENV)) as phoenix:
            sent = phoenix.annotate(warehouse.batches(SCORED, day, scoring.chunk_rows, present),
                                    threshold=scoring.hallucination_threshold, scale=scoring.scale,
                                    kind_of=lambda model: "CODE" if model in code else "LLM")
        context.log.info(sent.line())
        return dg.MaterializeResult(metadata={"rows": sent.rows, "annotations": sent.annotations,
                                              "rows_without_span_ids": sent.without_ids, "endpoint": sent.endpoint})

    return phoenix_annotations
