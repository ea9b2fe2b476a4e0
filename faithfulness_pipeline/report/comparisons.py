"""The report's words on its segments: each answering model against the first (in name order) over the
report's rows, and whether each difference is larger than its noise (``core.compare``'s Welch interval,
unpaired: the models answered different questions).

Computed from tallies per model x language (counts and the scores' moments, ``core.aggregates.tally``), so a
month of millions of answers is compared without holding its rows."""

from __future__ import annotations

from typing import Any

import polars as pl

from faithfulness_pipeline.core.aggregates import DAY_MODEL, merge_tallies
from faithfulness_pipeline.core.compare import (
    LARGER,
    SCORES,
    TOO_FEW,
    CompareConfig,
    Side,
    correction,
    unpaired_share_of,
    verdict_of,
    welch,
)

#: The keys of the tallies the comparison reads: the answering model (the daily tallies' model key) and the
#: row's language column.
MODEL, LANGUAGE = DAY_MODEL[1], "__language"


def _sentence(row: dict[str, Any], where: str) -> str:
    score = row["score"]
    head = (f"{where}{row['candidate_group']} against {row['baseline_group']}: mean {score} "
            f"{row['mean_candidate']:.3f} against {row['mean_baseline']:.3f}")
    if row["verdict"] == TOO_FEW:
        return f"{head}; too few answers to tell ({row['n_baseline']} and {row['n_candidate']})."
    return (f"{head}, a difference of {row['difference']:+.3f} (95 % interval {row['low']:+.3f} to "
            f"{row['high']:+.3f}): {'larger than' if row['verdict'] == LARGER else 'within'} its noise.")


def _side(row: dict[str, Any], score: str) -> Side:
    """One model's (and language's) side of the comparison, from its tally row."""
    n, total, m2 = (row[f"__{score}_{m}"] or 0 for m in ("n", "sum", "m2"))
    fpc = correction(row["answers"], row["sampled_answers"])
    return Side(int(n), total / n if n else None, m2 / (n - 1) if n > 1 else None, fpc)


def _rows(table: pl.DataFrame, config: CompareConfig, where: str) -> list[str]:
    """Sentences comparing each model of ``table`` (one tally row per model) with the first."""
    by_model = {row[MODEL]: row for row in table.filter(pl.col(MODEL).is_not_null()).sort(MODEL).iter_rows(named=True)}
    if len(by_model) < 2:
        return []
    base, *others = by_model
    lines = []
    for model in others:
        for score in SCORES:
            name = score.removesuffix("_score")
            b, c = _side(by_model[base], name), _side(by_model[model], name)
            if b.mean is None or c.mean is None:
                continue
            row = welch(b, c, config) | {"score": name, "baseline_group": base, "candidate_group": model}
            if name == "hallucination":
                row |= unpaired_share_of(by_model[base]["over_threshold_answers"], b.n,
                                         by_model[model]["over_threshold_answers"], c.n, config)
            row["verdict"] = verdict_of(min(b.n, c.n), row["low"], row["high"], config)
            if not where or row["verdict"] == LARGER:
                lines.append(_sentence(row, where))
    return lines


def model_differences(tallies: pl.DataFrame, threshold: float) -> list[str]:
    """One sentence per model and score over all rows, and one per language where the difference is larger
    than its noise; nothing when the rows have fewer than two models. ``tallies``: ``core.aggregates.tally``
    per :data:`MODEL` x :data:`LANGUAGE` (the language null where the table has no language column)."""
    config = CompareConfig(threshold=threshold)
    lines = _rows(merge_tallies([tallies.drop(LANGUAGE)], [MODEL]), config, "")
    if not lines:
        return []
    for language in tallies.get_column(LANGUAGE).drop_nulls().unique().sort().to_list():
        lines += _rows(tallies.filter(pl.col(LANGUAGE) == language), config, f"In {language}, ")
    return lines
