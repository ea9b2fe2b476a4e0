"""How the rows of an audit sample are shared out over its strata (``core.audit``).

The rows are handed out one at a time, always in the same order, and a sample of N rows is the first N of
that order. So a larger N never takes a row from a stratum: every stratum's share grows or stays, and since a
stratum takes the rows with its smallest audit points, the larger sample holds the smaller one (nested). A
share rounded from N on its own (largest remainders) promises no such thing: one more row in all can take
one from a stratum (the Alabama paradox of apportionment).

The order:

1. the minimum: every stratum's first row, then every stratum's second row, and so on up to ``minimum`` rows
   each (a stratum with fewer eligible rows gives what it has), each round the largest strata first. An N
   too small to give every stratum the minimum gives the larger strata theirs first;
2. the rest in proportion: each next row to the stratum with the most eligible rows per row it already has,
   ``N_h / (n_h + 1/2)`` (Sainte-Laguë's divisors, which round each stratum's proportional share
   ``N * N_h / sum(N)`` to the nearest row), until N rows are given.

Where every share is at least the minimum, the result is the proportional one (to the row when the shares are
whole numbers). Ties go to the larger stratum, then to the earlier one in the order the caller gives. An N of
at least every eligible row takes them all.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from fractions import Fraction
from typing import Final

from faithfulness_pipeline.core.errors import ConfigError

#: Rows every stratum gets before the rest is shared out in proportion: two, so that each stratum's labels
#: have a spread (a variance) of their own.
MINIMUM_PER_STRATUM: Final = 2


def allocate(eligible: Sequence[int], size: int, minimum: int = MINIMUM_PER_STRATUM) -> tuple[int, ...]:
    """How many of ``size`` rows each stratum gets, given its ``eligible`` rows (in the caller's order)."""
    if size < 1:
        raise ConfigError(f"an audit sample needs at least 1 row, got {size}")
    if minimum < 0 or any(n < 0 for n in eligible):
        raise ValueError("the minimum and the eligible rows are counts (0 or more)")
    counts = list(eligible)
    if size >= sum(counts):
        return tuple(counts)
    taken = [0] * len(counts)
    left = size
    largest_first = sorted(range(len(counts)), key=lambda h: (-counts[h], h))
    for level in range(minimum):
        for h in largest_first:
            if left == 0:
                return tuple(taken)
            if counts[h] > level:
                taken[h] += 1
                left -= 1
    _skip_ahead(counts, taken, left)
    left = size - sum(taken)
    # Exact fractions: two strata whose next rows are worth the same must tie, not differ in the last bit.
    waiting = [(-Fraction(2 * counts[h], 2 * taken[h] + 1), -counts[h], h)
               for h in range(len(counts)) if taken[h] < counts[h]]
    heapq.heapify(waiting)
    while left:
        _, _, h = heapq.heappop(waiting)
        taken[h] += 1
        left -= 1
        if taken[h] < counts[h]:
            heapq.heappush(waiting, (-Fraction(2 * counts[h], 2 * taken[h] + 1), -counts[h], h))
    return tuple(taken)


def _skip_ahead(counts: Sequence[int], taken: list[int], left: int) -> None:
    """Gives at once (in ``taken``) the proportional rows that surely come among the next ``left``, so that only
    the last few are handed out one by one, whatever the size.

    The next rows come by falling worth ``2 N_h / (2 k + 1)`` (k: the stratum's rows so far). With ``t = sum(N) /
    (left - strata)``, the rows worth more than ``t`` are fewer than ``left`` (a stratum has fewer than ``N_h / t
    + 1/2`` of them), so they all come first: a stratum's are those with ``(2 k + 1) sum(N) < 2 N_h (left -
    strata)``."""
    spare = left - len(counts)
    if spare <= 0:
        return
    total = sum(counts)
    for h, n in enumerate(counts):
        above = 2 * n * spare - total
        if above > 0:
            taken[h] = max(taken[h], min(n, -(-above // (2 * total))))
