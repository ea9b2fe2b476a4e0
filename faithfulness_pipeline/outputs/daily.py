"""The daily aggregates: one row per day x model, what BI dashboards chart."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.aggregates import AGGREGATE_SCHEMA, daily_aggregates
from faithfulness_pipeline.outputs.kinds import DAY, DayTable, OutputContext
from faithfulness_pipeline.outputs.markdown import aggregates_md

COLUMNS: Final[Mapping[str, str]] = MappingProxyType({
    "day": "The day (DATE) in the pipeline's time zone.",
    "model": "The model that wrote the answers (null when the table has no model column).",
    "answers": "Every row of the day and model that landed, error rows and rows outside the sample included.",
    "sampled_answers": "Rows in the run's sample (all of them unless sample_rate < 1): the rows judged.",
    "sample_share": "sampled_answers / answers: the realised sample rate.",
    "scored_answers": "Rows with status ok.",
    "error_answers": "Rows the judge could not score (never averaged in as 0).",
    "skipped_answers": "Rows in the sample that the spend cap (max_cost_usd) left unjudged (status skipped).",
    "error_rate": "error_answers / (sampled_answers - skipped_answers): over the rows judged.",
    "zero_claim_answers": "ok rows without any claim.",
    "claims": "Claims of the ok rows.",
    "supported_claims": "Supported claims.",
    "contradicted_claims": "Contradicted claims (contradicted_claims / claims is the exact claim-weighted rate).",
    "unsupported_claims": "Unsupported claims.",
    "speculative_claims": "Hedged claims.",
    "hallucination_mean": "Mean hallucination score of the rows with a score.",
    "hallucination_mean_low": "Lower bound of the 95 % interval of the mean over every answer of the group (normal, "
    "with the finite-population correction; equal to the mean for a census).",
    "hallucination_mean_high": "Upper bound of that interval.",
    "hallucination_p50": "Median hallucination score (linear interpolation, rounded like the scores).",
    "hallucination_p90": "90th percentile of the hallucination score (linear interpolation, rounded like the scores).",
    "faithfulness_mean": "Mean faithfulness score of the rows with a score.",
    "faithfulness_mean_low": "Lower bound of the 95 % interval of the faithfulness mean (as hallucination_mean_low).",
    "faithfulness_mean_high": "Upper bound of that interval.",
    "faithfulness_p50": "Median faithfulness score (linear interpolation, rounded like the scores).",
    "faithfulness_p90": "90th percentile of the faithfulness score (linear interpolation, rounded like the scores).",
    "hallucination_threshold": "The threshold of over_threshold_* (score units).",
    "over_threshold_answers": "Answers whose hallucination score is above the threshold.",
    "over_threshold_share": "over_threshold_answers / answers with a hallucination score.",
    "over_threshold_share_low": "Lower bound of the share's 95 % interval (Wilson, with the finite-population "
    "correction; equal to the share for a census).",
    "over_threshold_share_high": "Upper bound of that interval.",
    "llm_calls": "LLM requests that produced the day's results (whichever run produced them).",
    "prompt_tokens": "Prompt tokens that produced the day's results.",
    "completion_tokens": "Completion tokens that produced the day's results.",
    "total_tokens": "prompt_tokens + completion_tokens.",
    "cost_usd": "What producing the day's results cost in USD (rows without a price left out).",
    "cost_unknown_answers": "Rows whose cost is unknown (a model without a price).",
    "cached_prompt_tokens": "Of prompt_tokens, those the provider served from its prompt cache.",
    "billed_llm_calls": "LLM requests the run that scored the day paid for.",
    "billed_prompt_tokens": "Prompt tokens the run paid for.",
    "billed_completion_tokens": "Completion tokens the run paid for.",
    "billed_cost_usd": "The provider's bill for scoring the day in USD (null when a model has no price).",
    "billed_cached_prompt_tokens": "Of billed_prompt_tokens, those the provider served from its prompt cache.",
    "store_answers": "Answers served from the result store.",
    "duplicate_answers": "Answers copied from an identical answer of the same run.",
    "store_share": "store_answers / sampled_answers.",
    "duplicate_share": "duplicate_answers / sampled_answers.",
})

#: What the aggregates read of the scored table (the rest stays on disk).
_AGGREGATED: Final = ("status", "n_claims", "n_supported", "n_contradicted", "n_unsupported", "n_speculative",
                      "hallucination_score", "faithfulness_score", "judge_model", "prompt_version", S.RESULT_SOURCE,
                      *S.USAGE_COLUMNS, *S.BILLED_COLUMNS)


def _reads(present: list[str], context: OutputContext) -> list[str]:
    return [c for c in dict.fromkeys((*_AGGREGATED, context.model_column)) if c in present]


def _build(rows: pl.DataFrame, context: OutputContext) -> pl.DataFrame:
    return daily_aggregates(rows, day_column=DAY, model_column=context.model_column,
                            hallucination_threshold=context.hallucination_threshold, scale=context.scale)


DAILY_TABLE: Final = DayTable(
    name="daily_answer_quality",
    description="One row per day x model: answers, errors, score means and percentiles with 95 % intervals, the "
    "share over the hallucination threshold, claim counts, tokens and cost.",
    columns=COLUMNS,
    kinds=frozenset({"polars"}),
    option="--daily-out",
    option_help="Also write the daily aggregates (one row per day x model, Parquet; a row's day is the date of "
    "its timestamp column, FP_TIMESTAMP_COLUMN, else of scored_at, in FP_TIMEZONE).",
    revision="daily-3",  # 2: sampled answers and 95 % intervals; 3: skipped answers, cached prompt tokens
    checks=("counts_every_answer",),
    day_in_rows=True,
    reads=_reads,
    build=_build,
    schema=lambda context: pl.Schema(AGGREGATE_SCHEMA),
    preview=aggregates_md,
)
