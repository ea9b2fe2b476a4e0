"""The model comparison: each day's answering models (and app versions) against the first, per score, over the
day and per language, with 95 % intervals and whether each difference is larger than its noise
(``core.compare``, unpaired: the models answered different questions). A day where no such column has two
values has no rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from types import MappingProxyType
from typing import Final

import polars as pl

from faithfulness_pipeline.core.compare import LARGER, SCORES, CompareConfig, compare_segments
from faithfulness_pipeline.outputs.kinds import DAY, DayTable, OutputContext
from faithfulness_pipeline.outputs.markdown import cell

#: The table's columns, the same on every day (a day with one model writes none of its rows).
COMPARISON_SCHEMA: Final = pl.Schema({
    "day": pl.Date(), "segment": pl.String(), "baseline_group": pl.String(), "candidate_group": pl.String(),
    "score": pl.String(), "group_by": pl.String(), "group": pl.String(), "pairing": pl.String(),
    "n_baseline": pl.Int64(), "n_candidate": pl.Int64(), "mean_baseline": pl.Float64(),
    "mean_candidate": pl.Float64(), "difference": pl.Float64(), "low": pl.Float64(), "high": pl.Float64(),
    "p_value": pl.Float64(), "share_over_baseline": pl.Float64(), "share_over_candidate": pl.Float64(),
    "share_difference": pl.Float64(), "share_p_value": pl.Float64(), "share_test": pl.String(),
    "verdict": pl.String(),
})

COLUMNS: Final[Mapping[str, str]] = MappingProxyType({
    "day": "The day (DATE) in the pipeline's time zone.",
    "segment": "What is compared: the column and the candidate group against the baseline group "
    "(model=b vs a).",
    "baseline_group": "The group every other group of the column is compared against (the first in name order).",
    "candidate_group": "The group compared against the baseline.",
    "score": "The score compared: hallucination_score or faithfulness_score.",
    "group_by": "all (the whole day) or the column the rows are split by (language).",
    "group": "The value of group_by the row is about (all for the whole day).",
    "pairing": "unpaired: the groups answered different questions (Welch's interval).",
    "n_baseline": "Scored answers of the baseline group.",
    "n_candidate": "Scored answers of the candidate group.",
    "mean_baseline": "Mean score of the baseline group.",
    "mean_candidate": "Mean score of the candidate group.",
    "difference": "mean_candidate - mean_baseline.",
    "low": "Lower bound of the difference's 95 % interval (null with too few rows).",
    "high": "Upper bound of the difference's 95 % interval.",
    "p_value": "Two-sided p-value of the difference.",
    "share_over_baseline": "Share of the baseline group's answers over the hallucination threshold.",
    "share_over_candidate": "Share of the candidate group's answers over the hallucination threshold.",
    "share_difference": "share_over_candidate - share_over_baseline.",
    "share_p_value": "p-value of the share difference (share_test).",
    "share_test": "The test of the share difference (two-proportion z for unpaired groups).",
    "verdict": "larger than noise (the interval excludes 0), within noise, or too few rows.",
})


def day_comparison(scored: pl.DataFrame, day: date, model_column: str, threshold: float,
                   segment_columns: Sequence[str] = ()) -> pl.DataFrame:
    """The comparison rows of one day's scored rows: the groups of the model column and of each
    ``segment_columns``, where the day has two or more of them (none otherwise)."""
    by = [c for c in dict.fromkeys((model_column, *segment_columns))
          if c in scored.columns and scored.get_column(c).drop_nulls().n_unique() >= 2]
    if not by:
        return pl.DataFrame(schema=COMPARISON_SCHEMA)
    config = CompareConfig(threshold=threshold)
    table = pl.concat([compare_segments(scored, column, groups=[c for c in ("language",) if c in scored.columns],
                                        config=config) for column in by], how="diagonal_relaxed")
    table = table.with_columns(pl.lit(day, dtype=pl.Date).alias("day"))
    return table.select(pl.col(name).cast(dtype) if name in table.columns else pl.lit(None, dtype=dtype).alias(name)
                        for name, dtype in COMPARISON_SCHEMA.items())


def _reads(present: list[str], context: OutputContext) -> list[str]:
    wanted = (*SCORES, "status", "language", context.model_column, *context.segment_columns)
    return [c for c in dict.fromkeys(wanted) if c in present]


def _build(rows: pl.DataFrame, context: OutputContext) -> pl.DataFrame:
    """The comparison of every day among ``rows``, day by day."""
    days = sorted(rows.get_column(DAY).drop_nulls().unique().to_list())
    parts = [day_comparison(rows.filter(pl.col(DAY) == day).drop(DAY), day, context.model_column,
                            context.hallucination_threshold, context.segment_columns) for day in days]
    return pl.concat(parts) if parts else pl.DataFrame(schema=COMPARISON_SCHEMA)


def _larger(table: pl.DataFrame) -> str:
    """The differences larger than their noise, a line each."""
    larger = table.filter(pl.col("verdict") == LARGER)
    return "\n".join(
        f"- {cell(r['segment'])}, {r['score']} ({r['group_by']} {cell(r['group'])}): {r['difference']:+.3f} "
        f"[{r['low']:+.3f}, {r['high']:+.3f}]" for r in larger.iter_rows(named=True)) or "-"


COMPARISON_TABLE: Final = DayTable(
    name="daily_model_comparison",
    description="One row per day x model against the day's first model x score x group (all, each language): "
    "means, the difference with its 95 % interval, the share over the hallucination threshold, and whether it "
    "is larger than its noise (docs/compare.md).",
    columns=COLUMNS,
    kinds=frozenset({"polars"}),
    option="--comparison-out",
    option_help="Also write the model comparison (each day's answering models, and the groups of "
    "FP_SEGMENT_COLUMNS, against the first, with 95 % intervals; Parquet; days as for --daily-out).",
    revision="comparison-2",
    day_in_rows=True,
    reads=_reads,
    build=_build,
    schema=lambda context: COMPARISON_SCHEMA,
    preview=_larger,
    preview_key="larger_than_noise",
)
