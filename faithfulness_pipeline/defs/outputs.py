"""One asset per entry of the list of outputs (``outputs.catalog``), every one made by the helper here.

The scored table is made of the day's judged rows (``defs.scored``); every other output of the day's scored
table: a table built chunk by chunk (the claim table), a table of the day's rows together (the daily
aggregates, the model comparison, the review queue), or records sent to another system (evaluation events,
Phoenix annotations), which exist in the code location when its settings name that system as it loads.
A table's kinds name the warehouse's table format; its code version carries the judge's identity when the
judge produced what it holds: after a prompt change Dagster shows it stale.
"""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import date
from typing import Any

import dagster as dg
import polars as pl

from faithfulness_pipeline.defs.calibration import latest_calibration
from faithfulness_pipeline.defs.labelled_days import with_labels
from faithfulness_pipeline.defs.metadata import scored_metadata, table_metadata, version_metadata
from faithfulness_pipeline.defs.names import CLAIMS, GROUP, LABELS, RAW, SCORED, VERDICTS
from faithfulness_pipeline.defs.resources import (
    JudgeResource,
    LabelsResource,
    ReviewResource,
    ScoringResource,
    TracesResource,
)
from faithfulness_pipeline.defs.scored import scored_chunks
from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.outputs import ChunkTable, DayTable, Output, OutputContext, Sent, TableOutput, entries
from faithfulness_pipeline.outputs.kinds import DAY
from faithfulness_pipeline.outputs.scored_table import SCORED_TABLE
from faithfulness_pipeline.settings.review import REVIEW_SAMPLE_SIZE
from faithfulness_pipeline.settings.traces import TraceExportSettings

#: What a day's scored table is made of, and what every other output is made of.
_SCORED_DEPS = [RAW, CLAIMS, VERDICTS]


def output_context(scoring: ScoringResource, warehouse: WarehouseResource, day: str,
                   review: ReviewResource | None = None) -> OutputContext:
    """What the outputs of ``day`` read of the settings, in the warehouse (whose views join tables)."""
    return OutputContext(
        model_column=scoring.model_column, id_column=scoring.id_column, turn_column=scoring.turn_column,
        key_column=scoring.key_column, answer_column=scoring.output_column,
        hallucination_threshold=scoring.hallucination_threshold, scale=scoring.scale,
        segment_columns=tuple(warehouse.segment_columns),
        heavy_columns=(scoring.context_column, scoring.messages_column), chunk_rows=scoring.chunk_rows,
        day=date.fromisoformat(day), views_join=True,
        review_sample_size=REVIEW_SAMPLE_SIZE if review is None else review.review_sample_size,
    )


def output_assets(
    partitions: dg.PartitionsDefinition[str], versioned: Callable[[str], str], traces: TraceExportSettings,
    table_format: str,
) -> list[dg.AssetsDefinition]:
    """An asset per output the code location has: every table, and each sent output whose place ``traces``
    names; ``versioned`` adds the judge's identity to a code version."""
    made = []
    for entry in entries():
        if isinstance(entry, TableOutput):
            made.append(_table_asset(entry, partitions, versioned, table_format))
        elif isinstance(entry, Sent) and entry.enabled(traces):
            made.append(_sent_asset(entry, partitions))
    return made


def _asset(entry: Output, partitions: dg.PartitionsDefinition[str], code_version: str,
           kinds: set[str]) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """The asset decorator of ``entry``: its name, kinds and description, after what it is made of."""
    deps = _SCORED_DEPS if entry is SCORED_TABLE else [SCORED, *([LABELS] if _labelled(entry) else [])]
    return dg.asset(name=entry.name, group_name=GROUP, partitions_def=partitions, code_version=code_version,
                    kinds=kinds, deps=deps, description=entry.description)


def _labelled(entry: Output) -> bool:
    return isinstance(entry, DayTable) and entry.labelled


def _table_asset(entry: TableOutput, partitions: dg.PartitionsDefinition[str], versioned: Callable[[str], str],
                 table_format: str) -> dg.AssetsDefinition:
    code_version = versioned(entry.revision) if entry.judged else entry.revision

    @_asset(entry, partitions, code_version, {table_format, *entry.kinds})
    def _table(
        context: dg.AssetExecutionContext, judge: JudgeResource, scoring: ScoringResource,
        warehouse: WarehouseResource, labels: LabelsResource, review: ReviewResource,
    ) -> dg.MaterializeResult:  # type: ignore[type-arg]
        day = context.partition_key
        made = output_context(scoring, warehouse, day, review)
        if isinstance(entry, ChunkTable):
            metadata = _write_chunks(entry, context, judge, scoring, warehouse, made)
        else:
            assert isinstance(entry, DayTable)
            if entry.labelled:
                made = with_labels(made, warehouse, labels)
            metadata = _write_day(entry, warehouse, made)
        metadata["path"] = dg.MetadataValue.path(warehouse.location(entry.name, day))
        if entry.judged:
            metadata["calibration"] = latest_calibration(context.instance, *_judges_of(warehouse, day))
        return dg.MaterializeResult(metadata=metadata)

    return _table


def _write_chunks(entry: ChunkTable, context: dg.AssetExecutionContext, judge: JudgeResource,
                  scoring: ScoringResource, warehouse: WarehouseResource, made: OutputContext) -> dict[str, Any]:
    """The table of every chunk of the day's scored rows, written as it is built."""
    day = context.partition_key
    tally: Counter[str] = Counter()
    rows = 0
    schema: pl.Schema | None = None
    chunks, empty = _scored_rows(entry, context, judge, scoring, warehouse, made)
    with warehouse.writer(entry.name, day, empty=empty) as out:
        for chunk in chunks:
            table = entry.build(chunk, made)
            out.write(table)
            tally += entry.tally(table)
            rows += table.height
            schema = schema or table.schema
    metadata = {**table_metadata(schema or warehouse.table_schema(entry.name, day), entry.name, rows),
                **version_metadata(warehouse.format_name(), out.committed),
                **{name: n for name, n in sorted(tally.items())}}
    if entry is SCORED_TABLE:
        metadata.update(scored_metadata(warehouse.scan(SCORED, [day]), scale=made.scale,
                                        answer_column=made.answer_column))
    return metadata


def _scored_rows(entry: ChunkTable, context: dg.AssetExecutionContext, judge: JudgeResource,
                 scoring: ScoringResource, warehouse: WarehouseResource,
                 made: OutputContext) -> tuple[Iterator[pl.DataFrame], pl.Schema | None]:
    """The day's scored rows an output is built from, and its schema for a day without rows: the scoring of
    the day's judged rows for the scored table, the scored table's rows, read back, for the others."""
    day = context.partition_key
    if entry is SCORED_TABLE:
        model, prompt = judge.identity()
        return scored_chunks(warehouse, day, scoring, model, prompt, context.run.run_id), None
    present = warehouse.table_schema(SCORED, day)
    wanted = entry.reads(present.names(), made)
    empty = entry.build(pl.DataFrame(schema=present if wanted is None else pl.Schema(
        {c: present[c] for c in wanted})), made).schema
    return warehouse.batches(SCORED, day, made.chunk_rows, columns=wanted), empty


def _write_day(entry: DayTable, warehouse: WarehouseResource, made: OutputContext) -> dict[str, Any]:
    """The table of the day's scored rows together, from the columns it reads."""
    assert made.day is not None
    day = made.day.isoformat()
    scan = warehouse.scan(SCORED, [day])
    rows = scan.select(entry.reads(scan.collect_schema().names(), made)).collect()
    dated = rows.with_columns(pl.lit(made.day, dtype=pl.Date).alias(DAY))
    table = entry.build(dated, made)
    _, committed = warehouse.write_committed(entry.name, day, table)
    metadata = {**table_metadata(table.schema, entry.name, table.height),
                **version_metadata(warehouse.format_name(), committed)}
    if entry.preview is not None:
        metadata[entry.preview_key] = dg.MetadataValue.md(entry.preview(table))
    if entry.summary is not None:
        metadata[entry.summary_key] = dg.MetadataValue.md(entry.summary(dated, made))
    return metadata


def _judges_of(warehouse: WarehouseResource, day: str) -> tuple[str, str]:
    """(judge models, prompt versions) that scored ``day``, each joined by " + " where there are several."""
    judges = warehouse.scan(SCORED, [day]).select("judge_model", "prompt_version").unique().collect()
    models = " + ".join(sorted({m for m in judges.get_column("judge_model") if m}))
    prompts = " + ".join(sorted({p for p in judges.get_column("prompt_version") if p}))
    return models, prompts


def _sent_asset(entry: Sent, partitions: dg.PartitionsDefinition[str]) -> dg.AssetsDefinition:
    @_asset(entry, partitions, entry.revision, set(entry.kinds))
    def _sent(
        context: dg.AssetExecutionContext, warehouse: WarehouseResource, scoring: ScoringResource,
        traces: TracesResource,
    ) -> dg.MaterializeResult:  # type: ignore[type-arg]
        if not entry.enabled(traces):
            raise dg.Failure(entry.unset)
        day = context.partition_key
        made = output_context(scoring, warehouse, day)
        wanted = entry.reads(warehouse.table_schema(SCORED, day).names())
        delivered = entry.send(warehouse.batches(SCORED, day, made.chunk_rows, wanted), traces, made)
        context.log.info(delivered.line)
        if delivered.failed:
            raise dg.Failure(delivered.line)
        return dg.MaterializeResult(metadata=dict(delivered.figures))

    return _sent
