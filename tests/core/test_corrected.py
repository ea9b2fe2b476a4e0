"""Corrected figures per group: labels tied to scored rows, reviewers averaged, nothing dropped without a word,
a pool lending its labels to a group with too few, and inclusion probabilities weighing a stratified sample."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from faithfulness_pipeline.core.corrected import (
    FROM_GROUP,
    FROM_NONE,
    FROM_POOL,
    EstimateConfig,
    estimate_groups,
    labelled_scores,
)


def _scored(rng: np.random.Generator, rows: int, rate: float, language: str, day: str) -> tuple[pl.DataFrame,
                                                                                                  np.ndarray]:
    truth = rng.random(rows) < rate
    flag = np.where(truth, rng.random(rows) < 0.8, rng.random(rows) < 0.3)
    scored = pl.DataFrame({
        "row_key": [f"{language}-{day}-{i}" for i in range(rows)], "status": "ok", "language": language, "day": day,
        "judge_model": "j", "prompt_version": "p", "hallucination_score": np.where(flag, 1.0, 0.0),
        "faithfulness_score": np.where(flag, 0.0, 1.0),
    })
    return scored, truth


def test_each_group_is_corrected_by_its_own_labels_and_the_raw_figure_stays_beside_it() -> None:
    rng = np.random.default_rng(60)
    scored, truth = _scored(rng, 3000, 0.1, "en", "d1")
    picked = rng.choice(3000, 300, replace=False)
    labels = pl.DataFrame({"row_key": scored.get_column("row_key").gather(picked),
                           "label_hallucinated": truth[picked]})
    values, count = labelled_scores(scored, labels, EstimateConfig())
    table = estimate_groups(values, ["language"], EstimateConfig())
    row = table.row(0, named=True)
    assert count.used == 300 and row["labelled_answers"] == 300 and row["labels_from"] == FROM_GROUP
    assert row["over_threshold_share"] == pytest.approx(scored.get_column("hallucination_score").mean())
    assert row["over_threshold_share"] - truth.mean() > 0.15  # the judge's false positives
    assert row["over_threshold_share_corrected_low"] <= truth.mean() <= row["over_threshold_share_corrected_high"]
    assert row["hallucination_mean_corrected"] is None  # no label_faithfulness: nothing to correct it with


def test_labels_that_cannot_be_used_are_counted_and_named_and_reviewers_are_averaged() -> None:
    scored = pl.DataFrame({"row_key": ["a", "b", "c"], "status": ["ok", "ok", "error"],
                           "hallucination_score": [1.0, 0.0, None], "faithfulness_score": [0.0, 1.0, None]})
    labels = pl.DataFrame({"row_key": ["a", "a", "b", "c", "zz"], "reviewer": ["r1", "r2", "r1", "r1", "r1"],
                           "label_hallucinated": [True, False, False, True, True]})
    values, count = labelled_scores(scored, labels, EstimateConfig())
    assert (count.labelled_rows, count.used) == (4, 2)
    assert (count.unmatched_count, count.unmatched) == (1, ["zz"])
    assert (count.unjudged_count, count.unjudged) == (1, ["c"])
    assert (count.split_count, count.split) == (1, ["a"])
    assert values.filter(pl.col("row_key") == "a").get_column("__fp_y_over_threshold_share").item() == 0.5
    text = "\n".join(count.lines())
    assert "zz" in text and "'c'" in text and "disagree" in text


def test_a_group_with_too_few_labels_borrows_its_pools_and_says_so() -> None:
    rng = np.random.default_rng(61)
    big, big_truth = _scored(rng, 2000, 0.1, "ko", "d1")
    small, small_truth = _scored(rng, 500, 0.1, "ko", "d2")
    other, _ = _scored(rng, 500, 0.1, "zh", "d2")
    picked = rng.choice(2000, 200, replace=False)
    labels = pl.DataFrame({"row_key": [*big.get_column("row_key").gather(picked), small.get_column("row_key")[0]],
                           "label_hallucinated": [*(bool(t) for t in big_truth[picked]), bool(small_truth[0])]})
    values, _ = labelled_scores(pl.concat([big, small, other]), labels, EstimateConfig())
    table = estimate_groups(values, ["day", "language"], EstimateConfig())
    by = {(r["day"], r["language"]): r for r in table.iter_rows(named=True)}
    assert by[("d1", "ko")]["labels_from"] == FROM_GROUP
    assert by[("d2", "ko")]["labels_from"] == FROM_POOL and by[("d2", "ko")]["pooled_labels"] == 201
    assert by[("d2", "ko")]["over_threshold_share_corrected"] is not None
    assert by[("d2", "zh")]["labels_from"] == FROM_NONE  # no labels of zh anywhere
    assert by[("d2", "zh")]["over_threshold_share_corrected"] is None


def test_inclusion_probabilities_weigh_a_stratified_sample() -> None:
    """Two strata sampled at very different rates (seed 62): weighted, the estimate of the whole is unbiased;
    unweighted, it is pulled to the oversampled stratum."""
    rng = np.random.default_rng(62)
    weighted, unweighted, truths = [], [], []
    for _ in range(200):
        a, a_truth = _scored(rng, 1000, 0.05, "en", "d")
        b, b_truth = _scored(rng, 1000, 0.40, "zh", "d")
        pa, pb = rng.choice(1000, 20, replace=False), rng.choice(1000, 200, replace=False)
        labels = pl.DataFrame({
            "row_key": [*a.get_column("row_key").gather(pa), *b.get_column("row_key").gather(pb)],
            "label_hallucinated": [*a_truth[pa], *b_truth[pb]],
            "inclusion_probability": [0.02] * 20 + [0.2] * 200})
        scored = pl.concat([a, b])
        for out, lab in ((weighted, labels), (unweighted, labels.drop("inclusion_probability"))):
            values, _ = labelled_scores(scored, lab, EstimateConfig())
            out.append(estimate_groups(values, [], EstimateConfig()).get_column("over_threshold_share_corrected")[0])
        truths.append(np.concatenate([a_truth, b_truth]).mean())
    assert abs(np.mean(weighted) - np.mean(truths)) < 0.01
    assert np.mean(unweighted) - np.mean(truths) > 0.1
