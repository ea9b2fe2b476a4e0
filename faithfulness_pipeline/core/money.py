"""How an amount of money reads wherever a run's cost is printed (the run summary, the dry run's estimate, the
report)."""

from __future__ import annotations

import math

#: Most decimals shown: below a trillionth of a dollar an amount reads in scientific notation.
MAX_DECIMALS = 12


def usd(value: float) -> str:
    """``value`` USD to four decimals (a cheap model's run costs fractions of a cent), or, for an amount that
    four decimals would show as ``$0.0000`` (a cap of $1e-9, one token of a cheap model), to its first two
    significant digits: an amount that is not zero never reads as zero."""
    if value == 0 or not math.isfinite(value) or abs(value) >= 0.00005:
        return f"${value:.4f}"
    decimals = 1 - math.floor(math.log10(abs(value)))
    return f"${value:.{decimals}f}" if decimals <= MAX_DECIMALS else f"${value:.1e}"


def dollars(value: float | None) -> str:
    """:func:`usd`, and for None a model without a price: its cost is unknown, which ``$0.0000`` would hide."""
    return "unknown (no price for this model)" if value is None else usd(value)
