"""The report's words on its segments: each answering model against the first (in name order) over the
report's rows, and whether each difference is larger than its noise (``core.compare``, unpaired: the models
answered different questions)."""

from __future__ import annotations

from typing import Any

import polars as pl

from faithfulness_pipeline.core.compare import LARGER, SCORES, TOO_FEW, CompareConfig, compare_segments


def _sentence(row: dict[str, Any], where: str) -> str:
    score = row["score"]
    head = (f"{where}{row['candidate_group']} against {row['baseline_group']}: mean {score} "
            f"{row['mean_candidate']:.3f} against {row['mean_baseline']:.3f}")
    if row["verdict"] == TOO_FEW:
        return f"{head}; too few answers to tell ({row['n_baseline']} and {row['n_candidate']})."
    return (f"{head}, a difference of {row['difference']:+.3f} (95 % interval {row['low']:+.3f} to "
            f"{row['high']:+.3f}): {'larger than' if row['verdict'] == LARGER else 'within'} its noise.")


def model_differences(scored: pl.DataFrame, model_column: str, threshold: float,
                      language_column: str = "language") -> list[str]:
    """One sentence per model and score over all rows, and one per language where the difference is larger
    than its noise; nothing when the rows have fewer than two models."""
    needed = [c for c in (*SCORES, "status", model_column, language_column) if c in scored.columns]
    if model_column not in scored.columns or scored.get_column(model_column).drop_nulls().n_unique() < 2 or \
            len([c for c in needed if c in (*SCORES, "status")]) < 3:
        return []
    groups = [language_column] if language_column in scored.columns else []
    table = compare_segments(scored.select(needed), model_column, groups=groups,
                             config=CompareConfig(threshold=threshold))
    lines = [_sentence(row, "") for row in table.filter(pl.col("group_by") == "all").iter_rows(named=True)
             if row["mean_baseline"] is not None and row["mean_candidate"] is not None]
    lines += [_sentence(row, f"In {row['group']}, ") for row in table.filter(
        (pl.col("group_by") != "all") & (pl.col("verdict") == LARGER)).iter_rows(named=True)]
    return lines
