"""scored_conversations and what BI reads of it per day: claim_table and daily_answer_quality.

scored_conversations streams the day's raw_conversations, extracted_claims and judged_claims side by side
(the same rows in the same order, chunk for chunk) through the core's scoring. It carries what BI reads:
every input column but the heavy ones (the context column and the chat messages, which stay in
raw_conversations, joined by row_key where a query needs them: the DuckDB view ``answer_contexts``), and the
scores, claims, verdicts, reasons, status, judge and usage columns of the CLI's scored table.
"""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime

import dagster as dg
import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.aggregates import daily_aggregates
from faithfulness_pipeline.core.normalize import with_internals
from faithfulness_pipeline.core.outputs import claim_table as build_claim_table
from faithfulness_pipeline.core.pipeline import score_step
from faithfulness_pipeline.defs.calibration import latest_calibration
from faithfulness_pipeline.defs.metadata import aggregates_md, scored_metadata, table_metadata
from faithfulness_pipeline.defs.names import (
    CLAIM_TABLE,
    CLAIM_TABLE_REVISION,
    CLAIMS,
    DAILY,
    DAILY_REVISION,
    GROUP,
    LEGACY_JUDGE_COLUMNS,
    RAW,
    SCORED,
    SCORED_REVISION,
    VERDICTS,
)
from faithfulness_pipeline.defs.resources import JudgeResource, ScoringResource
from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.tables.read import rechunked

#: What the daily aggregates read of the scored table (the rest stays on disk).
_AGGREGATED = ("status", "n_claims", "n_supported", "n_contradicted", "n_unsupported", "n_speculative",
               "hallucination_score", "faithfulness_score", "judge_model", "prompt_version", S.RESULT_SOURCE,
               *S.USAGE_COLUMNS, *S.BILLED_COLUMNS)


def scored_assets(
    partitions: dg.PartitionsDefinition[str], versioned: Callable[[str], str]
) -> list[dg.AssetsDefinition]:
    """The scored table and its two BI tables; ``versioned`` adds the judge's identity to a code version."""
    return [
        _scored_conversations_asset(partitions, versioned),
        _claim_table_asset(partitions, versioned),
        _daily_answer_quality_asset(partitions, versioned),
    ]


def _scored_conversations_asset(
    partitions: dg.PartitionsDefinition[str], versioned: Callable[[str], str]
) -> dg.AssetsDefinition:
    """The scored table."""

    @dg.asset(
        name=SCORED,
        group_name=GROUP,
        partitions_def=partitions,
        code_version=versioned(SCORED_REVISION),
        kinds={"parquet", "polars"},
        deps=[RAW, CLAIMS, VERDICTS],
        description="The scored table (one row per judged answer): the input columns but the context and the chat "
        "messages (those stay in raw_conversations), claims, verdicts, counts, hallucination and faithfulness "
        "scores with reasons, status/error, judge model, prompt version and usage. Scores are Mastra's; error "
        "rows have null scores, never 0.",
    )
    def scored_conversations(
        context: dg.AssetExecutionContext, judge: JudgeResource, scoring: ScoringResource,
        warehouse: WarehouseResource,
    ) -> dg.MaterializeResult:  # type: ignore[type-arg]
        day = context.partition_key
        config = scoring.config()
        model, prompt = judge.identity()
        written = write_scored(warehouse, day, scoring, model, prompt, context.run.run_id)
        scan = warehouse.scan(SCORED, [day])
        metadata = {**table_metadata(written, SCORED, warehouse.rows(SCORED, day)),
                    **scored_metadata(scan, scale=config.scale, answer_column=config.columns.output)}
        metadata["calibration"] = latest_calibration(context.instance, model, prompt)
        metadata["path"] = dg.MetadataValue.path(warehouse.partition(SCORED, day).uri)
        return dg.MaterializeResult(metadata=metadata)

    return scored_conversations


#: What the warehouse's claim table leaves in scored_conversations' verdicts, where each passage is once; the
#: BI view of the claim table joins it back (defs/duckdb_views.py).
PASSAGES = ("evidence",)


def _claim_table_asset(
    partitions: dg.PartitionsDefinition[str], versioned: Callable[[str], str]
) -> dg.AssetsDefinition:
    """The claim table: one row per claim."""

    @dg.asset(
        name=CLAIM_TABLE,
        group_name=GROUP,
        partitions_def=partitions,
        code_version=versioned(CLAIM_TABLE_REVISION),
        kinds={"parquet", "polars"},
        deps=[SCORED],
        description="One row per claim with its verdict and reason, keyed by the answer's row_key, with the "
        "answer's day, model and conversation id; the deciding passage stays in scored_conversations' verdicts "
        "(the DuckDB view joins it back).",
    )
    def claim_table(
        context: dg.AssetExecutionContext, scoring: ScoringResource, warehouse: WarehouseResource
    ) -> dg.MaterializeResult:  # type: ignore[type-arg]
        day = context.partition_key
        columns = warehouse.table_schema(SCORED, day).names()
        carry = _carried(columns, scoring, date.fromisoformat(day))
        wanted = [c for c in (S.ROW_KEY, scoring.model_column, scoring.id_column, S.TRACE_ID, "verdicts",
                              "judge_model", "prompt_version", "scored_at") if c in columns]
        counts: dict[str, int] = {}
        empty = build_claim_table(_empty(warehouse, day), carry).drop(PASSAGES)
        with warehouse.writer(CLAIM_TABLE, day, empty=empty.schema) as out:
            for chunk in warehouse.batches(SCORED, day, scoring.chunk_rows, columns=list(dict.fromkeys(wanted))):
                table = build_claim_table(chunk, carry).drop(PASSAGES)
                out.write(table)
                for verdict, n in table.group_by("verdict").len().rows():
                    counts[verdict] = counts.get(verdict, 0) + int(n)
        return dg.MaterializeResult(metadata={
            "dagster/row_count": sum(counts.values()),
            **{f"{v}_claims": n for v, n in sorted(counts.items())},
        })

    return claim_table


def _daily_answer_quality_asset(
    partitions: dg.PartitionsDefinition[str], versioned: Callable[[str], str]
) -> dg.AssetsDefinition:
    """The daily aggregates per day x model."""

    @dg.asset(
        name=DAILY,
        group_name=GROUP,
        partitions_def=partitions,
        code_version=versioned(DAILY_REVISION),
        kinds={"parquet", "polars"},
        deps=[SCORED],
        description="BI aggregates per day x model: answers, errors, mean/p50/p90 of both scores, share over "
        "the hallucination threshold, claim counts, tokens and cost.",
    )
    def daily_answer_quality(
        context: dg.AssetExecutionContext, scoring: ScoringResource, warehouse: WarehouseResource
    ) -> dg.MaterializeResult:  # type: ignore[type-arg]
        day = date.fromisoformat(context.partition_key)
        scan = warehouse.scan(SCORED, [context.partition_key])
        present = scan.collect_schema().names()
        wanted = [c for c in (*_AGGREGATED, scoring.model_column) if c in present]
        slim = scan.select(list(dict.fromkeys(wanted))).collect()
        dated = slim.with_columns(pl.lit(day, dtype=pl.Date).alias("__fp_day"))
        table = daily_aggregates(
            dated, day_column="__fp_day", model_column=scoring.model_column,
            hallucination_threshold=scoring.hallucination_threshold, scale=scoring.scale,
        )
        warehouse.write(DAILY, context.partition_key, table)
        models = " + ".join(sorted({m for m in slim.get_column("judge_model").unique() if m}))
        prompts = " + ".join(sorted({p for p in slim.get_column("prompt_version").unique() if p}))
        return dg.MaterializeResult(metadata={
            **table_metadata(table.schema, DAILY, table.height),
            "preview": dg.MetadataValue.md(aggregates_md(table)),
            "calibration": latest_calibration(context.instance, models, prompts),
        })

    return daily_answer_quality

def heavy_columns(scoring: ScoringResource) -> tuple[str, ...]:
    """The input columns the scored table leaves in raw_conversations: the passages and the chat messages."""
    return (scoring.context_column, scoring.messages_column)


def _judged_chunks(warehouse: WarehouseResource, day: str, rows: int) -> Iterator[pl.DataFrame]:
    """The day's rows with their claims and verdicts: the three tables read side by side, chunk for chunk."""
    def frames(table: str) -> Iterator[pl.DataFrame]:
        if warehouse.rows(table, day) == 0:  # an empty day: one empty chunk, so its schema flows through
            yield pl.DataFrame(schema=warehouse.table_schema(table, day))
            return
        yield from rechunked(warehouse.batches(table, day, rows), rows)

    for r, c, v in zip(frames(RAW), frames(CLAIMS), frames(VERDICTS), strict=True):
        if not (r.get_column(S.ROW_KEY).equals(c.get_column(S.ROW_KEY))
                and r.get_column(S.ROW_KEY).equals(v.get_column(S.ROW_KEY))):
            raise RuntimeError(f"the tables of {day} do not hold the same rows in the same order: materialise "
                               f"{CLAIMS} and {VERDICTS} again")
        # judged_claims of the former layout carried every column and both steps' usage summed already
        former = S.CLAIMS in v.columns
        c, v = _with_cached_counts(c), _with_cached_counts(v)
        usage = [(v.get_column(n) if former else c.get_column(n) + v.get_column(n)).alias(n) for n in S.USAGE_COLUMNS]
        legacy = [n for n in LEGACY_JUDGE_COLUMNS if n in r.columns]
        # judged_claims written before the settings hash existed: the hash is unknown, never guessed
        settings = (v.get_column(S.JUDGE_SETTINGS) if S.JUDGE_SETTINGS in v.columns
                    else pl.repeat(None, v.height, dtype=pl.String, eager=True).alias(S.JUDGE_SETTINGS))
        yield r.drop(legacy).with_columns(
            c.get_column(S.CLAIMS), v.get_column(S.ERROR), v.get_column(S.VERDICTS),
            v.get_column(S.CONTEXT_TRUNCATED), *usage, v.get_column(S.RESULT_SOURCE),
            *[v.get_column(n) for n in S.BILLED_COLUMNS], settings,
        )


#: Columns that tables written before cached prompt tokens were counted lack.
_CACHED_COUNTS = ("cached_prompt_tokens", "billed_cached_prompt_tokens")


def _with_cached_counts(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with the cached prompt token counts a table judged before they existed lacks, as 0: none were
    counted then, and the day's other rows must still score."""
    missing = [n for n in _CACHED_COUNTS if n not in frame.columns]
    return frame.with_columns(pl.lit(0, dtype=pl.Int64).alias(n) for n in missing) if missing else frame


def write_scored(
    warehouse: WarehouseResource, day: str, scoring: ScoringResource, model: str, prompt: str, run_id: str
) -> pl.Schema:
    """Scores the day chunk by chunk into scored_conversations (``run_id``: the Dagster run's); the schema
    written."""
    config = scoring.config()
    heavy = heavy_columns(scoring)
    scored_at = datetime.now(UTC)
    schema: pl.Schema | None = None
    with warehouse.writer(SCORED, day) as out:
        for judged in _judged_chunks(warehouse, day, config.chunk_rows):
            scored = score_step(with_internals(judged, config), config, judge_model=model, prompt_version=prompt,
                                scored_at=scored_at, scoring_run_id=run_id)
            scored = scored.drop([c for c in heavy if c in scored.columns])
            schema = schema or scored.schema
            out.write(scored)
    if schema is None:  # a day without rows: the empty day's schema
        schema = warehouse.table_schema(SCORED, day)
    return schema


def _empty(warehouse: WarehouseResource, day: str) -> pl.DataFrame:
    return pl.DataFrame(schema=warehouse.table_schema(SCORED, day))


def _carried(columns: list[str], scoring: ScoringResource, day: date) -> dict[str, pl.Expr]:
    """What a claim row carries of its answer, so that drill-downs need no join."""
    return {
        "day": pl.lit(day, dtype=pl.Date),
        "model": pl.col(scoring.model_column).cast(pl.String) if scoring.model_column in columns
        else pl.lit(None, dtype=pl.String),
        "conversation_id": pl.col(scoring.id_column).cast(pl.String) if scoring.id_column in columns
        # rows made of spans: the trace is the conversation
        else pl.col(S.TRACE_ID).cast(pl.String) if S.TRACE_ID in columns else pl.lit(None, dtype=pl.String),
    }
