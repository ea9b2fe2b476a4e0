"""``daily_model_comparison``: each day's answering models against the first (in name order), per score, over
the day and per language, with 95 % intervals and whether each difference is larger than its noise
(``core.compare``, unpaired: the models answered different questions); the same for each column of
``FP_SEGMENT_COLUMNS`` the day's rows carry (an app or prompt version). A day where no such column has two
values has no rows."""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
from collections.abc import Callable, Sequence
from datetime import date

import dagster as dg
import polars as pl

from faithfulness_pipeline.core.compare import LARGER, SCORES, CompareConfig, compare_segments
from faithfulness_pipeline.defs.metadata import table_metadata
from faithfulness_pipeline.defs.names import COMPARISON, COMPARISON_REVISION, GROUP, SCORED
from faithfulness_pipeline.defs.resources import ScoringResource
from faithfulness_pipeline.defs.warehouse import WarehouseResource

#: The table's columns, the same on every day (a day with one model writes none of its rows).
COMPARISON_SCHEMA = pl.Schema({
    "day": pl.Date(), "segment": pl.String(), "baseline_group": pl.String(), "candidate_group": pl.String(),
    "score": pl.String(), "group_by": pl.String(), "group": pl.String(), "pairing": pl.String(),
    "n_baseline": pl.Int64(), "n_candidate": pl.Int64(), "mean_baseline": pl.Float64(),
    "mean_candidate": pl.Float64(), "difference": pl.Float64(), "low": pl.Float64(), "high": pl.Float64(),
    "p_value": pl.Float64(), "share_over_baseline": pl.Float64(), "share_over_candidate": pl.Float64(),
    "share_difference": pl.Float64(), "share_p_value": pl.Float64(), "share_test": pl.String(),
    "verdict": pl.String(),
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


def comparison_asset(
    partitions: dg.PartitionsDefinition[str], versioned: Callable[[str], str]
) -> dg.AssetsDefinition:
    @dg.asset(
        name=COMPARISON,
        group_name=GROUP,
        partitions_def=partitions,
        code_version=versioned(COMPARISON_REVISION),
        kinds={"parquet", "polars"},
        deps=[SCORED],
        description="Each day's answering models (and app versions: FP_SEGMENT_COLUMNS) against the first, per "
        "score, over the day and per language: "
        "means, the difference with its 95 % interval, the share over the hallucination threshold, and whether "
        "the difference is larger than its noise (docs/compare.md).",
    )
    def daily_model_comparison(
        context: dg.AssetExecutionContext, scoring: ScoringResource, warehouse: WarehouseResource
    ) -> dg.MaterializeResult:  # type: ignore[type-arg]
        present = warehouse.table_schema(SCORED, context.partition_key).names()
        segments = warehouse.segment_columns
        wanted = [c for c in (*SCORES, "status", "language", scoring.model_column, *segments) if c in present]
        slim = warehouse.scan(SCORED, [context.partition_key]).select(list(dict.fromkeys(wanted))).collect()
        table = day_comparison(slim, date.fromisoformat(context.partition_key), scoring.model_column,
                               scoring.hallucination_threshold, segments)
        warehouse.write(COMPARISON, context.partition_key, table)
        larger = table.filter(pl.col("verdict") == LARGER)
        return dg.MaterializeResult(metadata={
            **table_metadata(table.schema, COMPARISON, table.height),
            "larger_than_noise": dg.MetadataValue.md("\n".join(
                f"- {r['segment']}, {r['score']} ({r['group_by']} {r['group']}): {r['difference']:+.3f} "
                f"[{r['low']:+.3f}, {r['high']:+.3f}]" for r in larger.iter_rows(named=True)) or "-"),
        })

    return daily_model_comparison
