"""How an amount of money reads wherever a run's cost is printed (the run summary, the dry run's estimate)."""

from __future__ import annotations


def dollars(value: float | None) -> str:
    """``value`` USD to four decimals (a cheap model's run costs fractions of a cent). None is a model
    without a price: its cost is unknown, which ``$0.0000`` would hide."""
    return "unknown (no price for this model)" if value is None else f"${value:.4f}"
