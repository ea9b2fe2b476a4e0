"""Scores back on the spans they judged: the ``evaluation_events`` asset, one day of the scored table sent as
OpenTelemetry GenAI evaluation events (``traces.otel_events``). It is part of the code location when an
endpoint is set as it loads (``FP_OTEL_ENDPOINT``), like the partitions; the launchpad may point a run at
another endpoint through the ``traces`` resource."""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
import dagster as dg

from faithfulness_pipeline.defs.names import EVENTS, EVENTS_REVISION, GROUP, SCORED
from faithfulness_pipeline.defs.resources import ScoringResource, TracesResource
from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.traces.evaluations import COLUMNS


def build_trace_assets(partitions: dg.PartitionsDefinition[str]) -> list[dg.AssetsDefinition]:
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

    return [evaluation_events]
