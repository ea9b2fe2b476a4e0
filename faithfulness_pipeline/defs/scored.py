"""scored_conversations and what BI reads of it per day: claim_table and daily_answer_quality."""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
from collections.abc import Callable
from datetime import date

import dagster as dg
import polars as pl

from faithfulness_pipeline.core.aggregates import daily_aggregates
from faithfulness_pipeline.core.outputs import claim_table as build_claim_table
from faithfulness_pipeline.core.pipeline import score_step
from faithfulness_pipeline.defs.calibration import latest_calibration
from faithfulness_pipeline.defs.metadata import aggregates_md, scored_metadata
from faithfulness_pipeline.defs.names import (
    CLAIM_TABLE,
    CLAIM_TABLE_REVISION,
    DAILY,
    DAILY_REVISION,
    GROUP,
    LEGACY_JUDGE_COLUMNS,
    SCORED,
    SCORED_REVISION,
)
from faithfulness_pipeline.defs.resources import JudgeResource, ScoringResource


def scored_assets(
    partitions: dg.PartitionsDefinition[str], versioned: Callable[[str], str]
) -> list[dg.AssetsDefinition]:
    """The scored table and its two BI tables; ``versioned`` adds the judge's identity to a code version."""

    @dg.asset(
        name=SCORED,
        group_name=GROUP,
        partitions_def=partitions,
        code_version=versioned(SCORED_REVISION),
        kinds={"parquet", "polars"},
        description="The scored table (one row per judged answer): passthrough columns, claims, verdicts, "
        "counts, hallucination and faithfulness scores with reasons, status/error, judge model, prompt "
        "version and usage. Scores are Mastra's; error rows have null scores, never 0.",
    )
    def scored_conversations(
        context: dg.AssetExecutionContext, judged_claims: pl.DataFrame, judge: JudgeResource,
        scoring: ScoringResource,
    ) -> dg.Output[pl.DataFrame]:
        config = scoring.config()
        model, prompt = judge.identity()
        staged = judged_claims.drop([c for c in LEGACY_JUDGE_COLUMNS if c in judged_claims.columns])
        scored = score_step(staged, config, judge_model=model, prompt_version=prompt)
        metadata = scored_metadata(scored, scale=config.scale, answer_column=config.columns.output)
        metadata["calibration"] = latest_calibration(context.instance, model, prompt)
        return dg.Output(scored, metadata=metadata)

    @dg.asset(
        name=CLAIM_TABLE,
        group_name=GROUP,
        partitions_def=partitions,
        code_version=versioned(CLAIM_TABLE_REVISION),
        kinds={"parquet", "polars"},
        description="One row per claim with its verdict, reason and evidence, keyed by the answer's row_key, "
        "with the answer's day, model and conversation id (drill-downs need no join).",
    )
    def claim_table(
        context: dg.AssetExecutionContext, scored_conversations: pl.DataFrame, scoring: ScoringResource
    ) -> dg.Output[pl.DataFrame]:
        table = build_claim_table(scored_conversations, _carried(scored_conversations.columns, scoring,
                                                                 date.fromisoformat(context.partition_key)))
        by_verdict = dict(table.group_by("verdict").len().sort("verdict").rows())
        return dg.Output(table, metadata={f"{v}_claims": int(n) for v, n in by_verdict.items()})

    @dg.asset(
        name=DAILY,
        group_name=GROUP,
        partitions_def=partitions,
        code_version=versioned(DAILY_REVISION),
        kinds={"parquet", "polars"},
        description="BI aggregates per day x model: answers, errors, mean/p50/p90 of both scores, share over "
        "the hallucination threshold, claim counts, tokens and cost.",
    )
    def daily_answer_quality(
        context: dg.AssetExecutionContext, scored_conversations: pl.DataFrame, scoring: ScoringResource
    ) -> dg.Output[pl.DataFrame]:
        day = date.fromisoformat(context.partition_key)
        dated = scored_conversations.with_columns(pl.lit(day, dtype=pl.Date).alias("__fp_day"))
        table = daily_aggregates(
            dated, day_column="__fp_day", model_column=scoring.model_column,
            hallucination_threshold=scoring.hallucination_threshold,
        )
        models = " + ".join(sorted({m for m in scored_conversations.get_column("judge_model").unique() if m}))
        prompts = " + ".join(sorted({p for p in scored_conversations.get_column("prompt_version").unique() if p}))
        return dg.Output(table, metadata={
            "preview": dg.MetadataValue.md(aggregates_md(table)),
            "calibration": latest_calibration(context.instance, models, prompts),
        })

    return [scored_conversations, claim_table, daily_answer_quality]


def _carried(columns: list[str], scoring: ScoringResource, day: date) -> dict[str, pl.Expr]:
    """What a claim row carries of its answer, so that drill-downs need no join."""
    return {
        "day": pl.lit(day, dtype=pl.Date),
        "model": pl.col(scoring.model_column).cast(pl.String) if scoring.model_column in columns
        else pl.lit(None, dtype=pl.String),
        "conversation_id": pl.col(scoring.id_column).cast(pl.String) if scoring.id_column in columns
        else pl.lit(None, dtype=pl.String),
    }
