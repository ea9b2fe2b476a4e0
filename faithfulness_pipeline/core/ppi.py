"""Prediction-powered estimates of a mean: the judge's figure on every row, corrected by people's labels on a
random subset (Angelopoulos et al., "Prediction-powered inference", Science 2023; power tuning from "PPI++",
Angelopoulos, Duchi and Zrnic 2023).

With ``y`` the people's value on ``n`` labelled rows, ``f`` the judge's value on the same rows and ``f_all``
the judge's value on the ``N`` rows reported on, the estimate is

    theta = lam * mean(f_all) + mean(y - lam * f)

It is unbiased for the mean of ``y`` over the rows whatever the judge's quality, provided the labelled rows are
a random sample of them (a stratified sample with its inclusion probabilities as weights): the second term
measures and removes the judge's error. ``lam`` in [0, 1] weighs how far the judge is trusted: 0 is the labels
alone, 1 is plain PPI; power tuning picks the ``lam`` that minimises the estimate's variance, estimated from the
same rows (with a good judge the interval is narrower than the labels alone give, with a useless one no
wider). The estimate, the tuned ``lam`` and, with ``interval="ppi"``, the interval are ppi-python's
(``ppi_mean_pointestimate`` and ``ppi_mean_ci`` of ppi-python 0.2.3, weights included; the tests hold them equal).

The default interval (``interval="rows"``) is about the rows reported on, not a stream they were drawn from:
``mean(f_all)`` is then known exactly, and only the labelled sample varies,

    se^2 = (1 - n / N) * s^2 / n,   s^2 the variance of y - lam * f

with the finite-population correction when the labelled rows are among the rows (not when they were lent by a
pool of other days: ``within=False``). Rare events make a sample's variance too small far more often than too
large (100 labels of a day where 5 % of answers hallucinate hold 5 on average, often 2), and a normal interval
built on it covers the truth too rarely; so ``s^2`` counts two imagined labelled rows besides the real ones, one
at each end of the label's range, judged at the labelled rows' mean (in the spirit of Agresti and Coull's
interval for a proportion). Simulated days (tests/core/test_ppi.py, bench/corrected.py) cover at about the
stated level where the plain normal interval falls to 86-90 %. Pure numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

#: Fewer labelled rows than this: no interval (the normal approximation needs some rows to stand on).
MIN_LABELS: Final = 10

Array = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Corrected:
    """A prediction-powered estimate: the value, its interval (None where the labels are too few), the labelled
    and judged rows it stands on, and the ``lam`` it used."""

    estimate: float | None
    low: float | None
    high: float | None
    labelled: int
    rows: int
    lam: float | None
    se: float | None = None

    @property
    def half_width(self) -> float | None:
        return None if self.low is None or self.high is None else (self.high - self.low) / 2


@dataclass(frozen=True, slots=True)
class Judged:
    """The judge's values on the rows reported on, unweighted, as the three sums the estimate needs of them
    (count, mean and the sum of squared deviations from it): a month's rows can be folded into them group by
    group without holding the rows (``core.corrected``)."""

    count: int
    mean: float
    squares: float

    @classmethod
    def of(cls, values: Array) -> Judged:
        v = np.asarray(values, dtype=np.float64)
        mean = float(v.mean()) if len(v) else 0.0
        return cls(len(v), mean, float(((v - mean) ** 2).sum()))


def _weights(weights: Array | None, n: int) -> Array:
    """Weights scaled to mean 1 (ppi-python's convention), ones when none are given."""
    if weights is None:
        return np.ones(n)
    w: Array = np.asarray(weights, dtype=np.float64)
    scaled: Array = w / w.mean()
    return scaled


def tuned_lambda(y: Array, f: Array, f_all: Array | Judged, w: Array | None = None,
                 w_all: Array | None = None) -> float:
    """The ``lam`` that minimises the estimate's variance, clipped to [0, 1]: the covariance of the people's
    and the judge's (weighted) values over the judge's variance, shrunk by ``1 + n / N`` (the labelled rows' own
    noise). The values are centred on the plain PPI estimate first, as ppi-python centres its gradients: with
    unequal weights the centre changes the weighted values, so it is part of the definition."""
    if isinstance(f_all, Judged):
        return _tuned_lambda_judged(y, f, f_all, w)
    n, big_n = len(y), len(f_all)
    wn, wb = _weights(w, n), _weights(w_all, big_n)
    centre = float((wb * f_all).mean() + (wn * (y - f)).mean())
    gy, gf, gf_all = wn * (y - centre), wn * (f - centre), wb * (f_all - centre)
    covariance = float(np.mean((gy - gy.mean()) * (gf - gf.mean())))
    spread = float(np.var(np.concatenate([gf, gf_all]), ddof=1)) if n + big_n > 1 else 0.0
    if spread <= 0.0:  # a judge that says the same of every row adds nothing: the labels alone
        return 0.0
    return min(1.0, max(0.0, covariance / ((1 + n / big_n) * spread)))


def _tuned_lambda_judged(y: Array, f: Array, judged: Judged, w: Array | None) -> float:
    """:func:`tuned_lambda` with the judged rows as their sums: the variance of the labelled and the judged
    values together is their pooled sum of squares about the common mean (the rows' ``squares`` about their
    own mean shifted to it), equal to the array form's up to rounding."""
    n, big_n = len(y), judged.count
    wn = _weights(w, n)
    centre = float(judged.mean + (wn * (y - f)).mean())
    gy, gf = wn * (y - centre), wn * (f - centre)
    covariance = float(np.mean((gy - gy.mean()) * (gf - gf.mean())))
    total = n + big_n
    if total <= 1:
        return 0.0
    judged_mean = judged.mean - centre
    mean = (float(gf.sum()) + big_n * judged_mean) / total
    squares = (float(((gf - mean) ** 2).sum()) + judged.squares + big_n * (judged_mean - mean) ** 2)
    spread = squares / (total - 1)
    if spread <= 0.0:  # a judge that says the same of every row adds nothing: the labels alone
        return 0.0
    return min(1.0, max(0.0, covariance / ((1 + n / big_n) * spread)))


def ppi_mean(y: Array, f: Array, f_all: Array | Judged, *, weights: Array | None = None,
             weights_all: Array | None = None, lam: float | None = None, level: float = 0.95,
             interval: Literal["rows", "ppi"] = "rows", within: bool = True, bounds: tuple[float, float] = (0.0, 1.0),
             min_labels: int = MIN_LABELS) -> Corrected:
    """The prediction-powered estimate of the mean of ``y`` (people's values on the labelled rows) from ``f``
    (the judge's values on those rows) and ``f_all`` (the judge's values on every row reported on), with its
    ``level`` interval. ``weights``: the labelled rows' inverse inclusion probabilities where they were drawn
    unequally (a stratified audit sample); ``lam``: fixed instead of tuned (1 is plain PPI, 0 the labels
    alone); ``interval``: about the rows (``"rows"``, see the module) or ppi-python's (``"ppi"``); ``within``:
    the labelled rows are among the rows; ``bounds``: the range of a label. Fewer than ``min_labels`` labelled
    rows give the estimate without an interval. ``f_all`` may be the judged rows' sums (:class:`Judged`, no
    ``weights_all`` then): the same estimate and interval up to rounding, without the rows."""
    if isinstance(f_all, Judged):
        return _ppi_mean_judged(np.asarray(y, dtype=np.float64), np.asarray(f, dtype=np.float64), f_all,
                                weights=weights, lam=lam, level=level, interval=interval, within=within,
                                bounds=bounds, min_labels=min_labels)
    y, f, f_all = (np.asarray(a, dtype=np.float64) for a in (y, f, f_all))
    n, big_n = len(y), len(f_all)
    if len(f) != n:
        raise ValueError(f"{n} labels but {len(f)} judge values for them")
    if n == 0 or big_n == 0:
        return Corrected(None, None, None, n, big_n, None)
    w, w_all = _weights(weights, n), _weights(weights_all, big_n)
    chosen = tuned_lambda(y, f, f_all, weights, weights_all) if lam is None else lam
    imputed = w_all * chosen * f_all
    rectifier = w * (y - chosen * f)
    estimate = float(imputed.mean() + rectifier.mean())
    if n < max(min_labels, 2):
        return Corrected(estimate, None, None, n, big_n, chosen)
    if interval == "ppi":
        variance = float(imputed.std()) ** 2 / big_n + float(rectifier.std()) ** 2 / n
    else:
        judged = chosen * float(np.average(f, weights=w))
        imagined = np.array([bounds[0] - judged, bounds[1] - judged])
        share = min(n / big_n, 1.0) if within else 0.0
        variance = (1 - share) * float(np.var(np.concatenate([rectifier, imagined]), ddof=1)) / n
    z = NormalDist().inv_cdf(0.5 + level / 2)
    se = math.sqrt(variance)
    return Corrected(estimate, estimate - z * se, estimate + z * se, n, big_n, chosen, se)


def _ppi_mean_judged(y: Array, f: Array, judged: Judged, *, weights: Array | None, lam: float | None,
                     level: float, interval: Literal["rows", "ppi"], within: bool, bounds: tuple[float, float],
                     min_labels: int) -> Corrected:
    """:func:`ppi_mean` with the judged rows as their sums (unweighted: the judged term's weights are ones)."""
    n, big_n = len(y), judged.count
    if len(f) != n:
        raise ValueError(f"{n} labels but {len(f)} judge values for them")
    if n == 0 or big_n == 0:
        return Corrected(None, None, None, n, big_n, None)
    w = _weights(weights, n)
    chosen = tuned_lambda(y, f, judged, weights) if lam is None else lam
    rectifier = w * (y - chosen * f)
    estimate = float(chosen * judged.mean + rectifier.mean())
    if n < max(min_labels, 2):
        return Corrected(estimate, None, None, n, big_n, chosen)
    if interval == "ppi":
        variance = chosen**2 * judged.squares / big_n / big_n + float(rectifier.std()) ** 2 / n
    else:
        judged_labelled = chosen * float(np.average(f, weights=w))
        imagined = np.array([bounds[0] - judged_labelled, bounds[1] - judged_labelled])
        share = min(n / big_n, 1.0) if within else 0.0
        variance = (1 - share) * float(np.var(np.concatenate([rectifier, imagined]), ddof=1)) / n
    z = NormalDist().inv_cdf(0.5 + level / 2)
    se = math.sqrt(variance)
    return Corrected(estimate, estimate - z * se, estimate + z * se, n, big_n, chosen, se)


def labels_needed(half_width: float, *, y_variance: float, residual_variance: float, imputed_variance: float,
                  rows: int, level: float = 0.95) -> int:
    """How many labelled rows a group of ``rows`` needs for an interval of ``half_width`` (PPI power analysis):
    ``residual_variance`` is the variance of ``y - lam * f`` measured on labelled rows of the same judge (the
    better the judge, the smaller), ``imputed_variance`` that of ``lam * f`` over the group's rows. Never more
    than the labels alone would need (``y_variance``), nor more than the group holds, nor fewer than
    :data:`MIN_LABELS`."""
    if half_width <= 0:
        raise ValueError(f"the interval's half-width must be above 0, got {half_width}")
    z = NormalDist().inv_cdf(0.5 + level / 2)
    budget = (half_width / z) ** 2 - imputed_variance / max(rows, 1)
    alone = math.ceil(y_variance / (half_width / z) ** 2)
    need = alone if budget <= 0 else min(alone, math.ceil(residual_variance / budget))
    return max(MIN_LABELS, min(rows, need))
