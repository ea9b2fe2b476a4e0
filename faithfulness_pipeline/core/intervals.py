"""The few distributions the comparisons need, without scipy at run time: Student's t (through the
regularised incomplete beta function, Lentz's continued fraction), the normal (the standard library's), and
the exact binomial tail of McNemar's test. The tests hold them against scipy."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Final

import numpy as np

_EPS: Final = 1e-14
_TINY: Final = 1e-300


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on the CDF)."""
    if df > 1e6:
        return NormalDist().inv_cdf(p)
    low, high = -1e3, 1e3
    for _ in range(200):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2.0


def t_two_sided_p(t: float, df: float) -> float:
    return min(1.0, 2.0 * (1.0 - t_cdf(abs(t), df)))


def normal_two_sided_p(z: float) -> float:
    return min(1.0, 2.0 * (1.0 - NormalDist().cdf(abs(z))))


def mcnemar_exact_p(only_baseline: int, only_candidate: int) -> float:
    """McNemar's exact test: the two-sided binomial tail of the discordant pairs at one half.

    Summed in log space: from about 1,024 discordant pairs on, ``2**n`` and the binomial coefficients leave
    a float's range, and a month's comparison has millions."""
    n = only_baseline + only_candidate
    k = min(only_baseline, only_candidate)
    if n == 0 or 2 * k >= n:
        return 1.0
    # log P(X = i) for i = 0..k, each from the one before by the ratio (n - i) / (i + 1)
    steps = np.arange(k, dtype=np.float64)
    logs = -n * math.log(2.0) + np.concatenate(([0.0], np.cumsum(np.log((n - steps) / (steps + 1.0)))))
    top = float(logs.max())
    tail = math.exp(top + math.log(float(np.sum(np.exp(logs - top)))))
    return min(1.0, 2.0 * tail)
