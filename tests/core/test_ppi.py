"""Prediction-powered estimates: equal to ppi-python's, unbiased and covering at their level by simulation, and
never worse than the labels alone."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pytest

from faithfulness_pipeline.core.ppi import MIN_LABELS, Judged, labels_needed, ppi_mean

ppi_py = pytest.importorskip("ppi_py", reason="ppi-python (a dev dependency) is the oracle of these tests")


def _day(rng: np.random.Generator, rows: int, rate: float, tpr: float, fpr: float) -> tuple[np.ndarray, np.ndarray]:
    """A day of ``rows`` answers, ``rate`` of them hallucinated, and a judge's flags with these error rates."""
    y = (rng.random(rows) < rate).astype(float)
    f = np.where(y == 1, rng.random(rows) < tpr, rng.random(rows) < fpr).astype(float)
    return y, f


@pytest.mark.parametrize("weighted", [False, True])
def test_the_estimate_and_interval_equal_ppi_python(weighted: bool) -> None:
    rng = np.random.default_rng(50)
    for _ in range(100):
        rows = int(rng.integers(60, 3000))
        y_all, f_all = _day(rng, rows, rng.uniform(0.02, 0.5), rng.uniform(0.5, 1), rng.uniform(0, 0.4))
        if rng.random() < 0.3:
            f_all = rng.random(rows)  # a judge's score, not a flag
        labelled = rng.choice(rows, int(rng.integers(MIN_LABELS, min(rows, 400))), replace=False)
        y, f = y_all[labelled], f_all[labelled]
        w = rng.uniform(0.5, 3, len(labelled)) if weighted else None
        ours = ppi_mean(y, f, f_all, weights=w, interval="ppi")
        theirs = float(np.squeeze(ppi_py.ppi_mean_pointestimate(y, f, f_all, w=w)))
        low, high = (float(np.squeeze(b)) for b in ppi_py.ppi_mean_ci(y, f, f_all, alpha=0.05, w=w))
        assert ours.estimate == pytest.approx(theirs, abs=1e-12)
        assert (ours.low, ours.high) == (pytest.approx(low, abs=1e-12), pytest.approx(high, abs=1e-12))


def test_the_estimate_equals_truescores_given_the_unlabelled_rows() -> None:
    """truescore's ``ppi_estimate`` is the same PPI++ estimator (tuned lam, clipped to [0, 1]), fed differently:
    its judged term is the mean over the rows *without* a label, where ours takes every row reported on. Given
    the unlabelled rows as ``f_all``, the tuned lam and the estimate are the same; the intervals differ (it adds
    the judged term's variance and widens to Wilson's interval on rare labels; ours is about the rows)."""
    truescore = pytest.importorskip("truescore", reason="truescore (a dev dependency) is the oracle of this test")
    rng = np.random.default_rng(54)
    for _ in range(100):
        rows = int(rng.integers(60, 3000))
        y_all, f_all = _day(rng, rows, rng.uniform(0.02, 0.5), rng.uniform(0.5, 1), rng.uniform(0, 0.4))
        if rng.random() < 0.3:
            f_all = rng.random(rows)
        labelled = rng.choice(rows, int(rng.integers(MIN_LABELS, min(rows - 2, 400))), replace=False)
        unlabelled = np.setdiff1d(np.arange(rows), labelled)
        ours = ppi_mean(y_all[labelled], f_all[labelled], f_all[unlabelled])
        theirs = truescore.ppi_estimate(f_all, y_all[labelled], labelled)
        assert ours.lam == pytest.approx(theirs.lambda_, abs=1e-12)
        assert ours.estimate == pytest.approx(theirs.point, abs=1e-12)


@pytest.mark.parametrize(("rate", "tpr", "fpr"), [(0.05, 0.49, 0.29), (0.05, 0.9, 0.1), (0.2, 0.49, 0.29)])
def test_unbiased_and_covering_where_the_judges_share_is_far_off(rate: float, tpr: float, fpr: float) -> None:
    """1,000 simulated days of 2,000 answers with 100 random labels (seed 51): the raw share is off by the judge's
    error, the corrected estimate is not, and its 95 % interval holds the day's true share 92-97.5 % of the time
    (the plain normal interval: 86-90 % at the 5 % rates)."""
    rng = np.random.default_rng(51)
    raw, corrected, covered = [], [], 0
    for _ in range(1000):
        y_all, f_all = _day(rng, 2000, rate, tpr, fpr)
        labelled = rng.choice(2000, 100, replace=False)
        result = ppi_mean(y_all[labelled], f_all[labelled], f_all)
        assert result.low is not None and result.high is not None and result.estimate is not None
        truth = y_all.mean()
        raw.append(f_all.mean() - truth)
        corrected.append(result.estimate - truth)
        covered += result.low <= truth <= result.high
    assert abs(np.mean(raw)) > 0.05  # the judge's own share is far from the truth
    assert abs(np.mean(corrected)) < 0.005
    assert 0.92 <= covered / 1000 <= 0.975


def test_power_tuning_is_no_worse_than_the_labels_alone_and_better_with_a_good_judge() -> None:
    rng = np.random.default_rng(52)
    y_all, _ = _day(rng, 5000, 0.2, 1, 0)
    labelled = rng.choice(5000, 200, replace=False)
    y = y_all[labelled]
    alone = ppi_mean(y, y, y_all, lam=0.0)  # lam 0: the labels' own interval
    noise = rng.random(5000)
    useless = ppi_mean(y, noise[labelled], noise)
    good_f = np.where(rng.random(5000) < 0.95, y_all, 1 - y_all)
    good = ppi_mean(y, good_f[labelled], good_f)
    assert alone.half_width is not None and useless.half_width is not None and good.half_width is not None
    assert useless.half_width <= alone.half_width * 1.05
    assert good.half_width < alone.half_width * 0.6


def test_too_few_labels_give_no_interval_and_no_labels_no_estimate() -> None:
    few = ppi_mean(np.ones(3), np.ones(3), np.ones(100))
    assert few.estimate == pytest.approx(1.0) and few.low is None and few.high is None
    none = ppi_mean(np.array([]), np.array([]), np.ones(100))
    assert none.estimate is None and none.labelled == 0


def test_labels_needed_shrink_with_a_better_judge_and_never_exceed_the_labels_alone() -> None:
    kwargs = dict(y_variance=0.09, imputed_variance=0.02, rows=100_000)
    weak = labels_needed(0.02, residual_variance=0.085, **kwargs)
    strong = labels_needed(0.02, residual_variance=0.02, **kwargs)
    alone = labels_needed(0.02, residual_variance=0.09, **kwargs)
    assert strong < weak <= alone
    assert labels_needed(0.5, residual_variance=0.09, **kwargs) == MIN_LABELS
    assert labels_needed(0.001, residual_variance=0.09, y_variance=0.09, imputed_variance=0.0, rows=500) == 500


@pytest.mark.parametrize("interval", ["rows", "ppi"])
def test_the_judged_rows_as_their_sums_give_the_same_figures_as_the_rows(interval: Literal["rows", "ppi"]) -> None:
    """``core.corrected`` folds a month's judged rows into count, mean and squared deviations per group: the
    estimate, the tuned lam and the interval must not change but by rounding."""
    rng = np.random.default_rng(55)
    for _ in range(100):
        rows = int(rng.integers(60, 3000))
        y_all, f_all = _day(rng, rows, rng.uniform(0.02, 0.5), rng.uniform(0.5, 1), rng.uniform(0, 0.4))
        if rng.random() < 0.3:
            f_all = rng.random(rows)
        labelled = rng.choice(rows, int(rng.integers(MIN_LABELS, min(rows, 400))), replace=False)
        w = rng.uniform(0.5, 3, len(labelled)) if rng.random() < 0.5 else None
        within = bool(rng.random() < 0.5)
        args = (y_all[labelled], f_all[labelled])
        rows_form = ppi_mean(*args, f_all, weights=w, interval=interval, within=within)
        sums_form = ppi_mean(*args, Judged.of(f_all), weights=w, interval=interval, within=within)
        for ours, theirs in ((rows_form.estimate, sums_form.estimate), (rows_form.lam, sums_form.lam),
                             (rows_form.low, sums_form.low), (rows_form.high, sums_form.high)):
            assert ours == pytest.approx(theirs, abs=1e-12)
