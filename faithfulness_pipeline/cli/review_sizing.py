"""Sizing the audit sample by what it buys (``review sample --half-width``): each stratum gets the labels its
corrected share over the threshold needs for a 95 % interval of the half-width asked (``core.ppi.labels_needed``),
at the judge's agreement with people measured on the labels so far, or, with none, at the labels-alone bound."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from faithfulness_pipeline.core.corrected import EstimateConfig, keyed_labels, labelled_scores, spread
from faithfulness_pipeline.core.ppi import labels_needed
from faithfulness_pipeline.review.labels import read_labels
from faithfulness_pipeline.settings.scoring import ScoringSettings

#: A share's variance at most (p (1 - p) at p = 1/2): what the labels alone need, judge unknown.
_WIDEST = 0.25


@dataclass(frozen=True, slots=True)
class Sizing:
    """Each stratum's labels from its eligible rows, and a line saying what they were sized by."""

    per_stratum: Callable[[int], int]
    line: str


def size_for(half_width: float, rows: pl.DataFrame, labels: str | None, scoring: ScoringSettings) -> Sizing:
    """The sizing of ``rows`` (scored rows' keys, status and hallucination score) for ``half_width``, measured on
    the labels at ``labels`` (a table, folder or label store; None: none yet)."""
    people, residual, imputed, measured = _WIDEST, _WIDEST, 0.0, 0
    if labels is not None and "hallucination_score" in rows.columns:
        config = EstimateConfig(threshold=scoring.hallucination_threshold, scale=scoring.scale)
        keyed = keyed_labels(read_labels(labels, scoring.columns().key_columns()), rows, id_column=scoring.id_column,
                             turn_column=scoring.turn_column, key_column=scoring.key_column)
        scored = rows if "faithfulness_score" in rows.columns else rows.with_columns(
            pl.lit(None, dtype=pl.Float64).alias("faithfulness_score"))  # only the share over the threshold is sized
        values, count = labelled_scores(scored, keyed, config)
        measured = count.used
        if measured >= 2:
            people, residual, imputed = spread(values)
    if measured >= 2:
        line = (f"sized for a 95 % interval of +-{half_width:g} on each stratum's corrected share: the judge's error "
                f"measured on {measured} labelled answers (people's variance {people:.3f}, what the judge leaves "
                f"{residual:.3f})")
    else:
        line = (f"sized for a 95 % interval of +-{half_width:g} on each stratum's corrected share: no labels to "
                f"measure the judge by yet, so the labels-alone bound (variance {_WIDEST})")

    def per_stratum(eligible: int) -> int:
        if eligible == 0:
            return 0
        return labels_needed(half_width, y_variance=people, residual_variance=residual, imputed_variance=imputed,
                             rows=eligible)

    return Sizing(per_stratum, line)
