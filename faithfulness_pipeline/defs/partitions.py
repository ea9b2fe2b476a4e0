"""Daily partitions on the conversations' UTC timestamp."""

from __future__ import annotations

import dagster as dg

#: First day of the sample data; set FP_PARTITIONS_START for your own tables.
DEFAULT_START = "2026-11-24"


def daily_partitions(start: str = DEFAULT_START) -> dg.DailyPartitionsDefinition:
    """One partition per UTC day from ``start`` to yesterday (today's partition opens when the day ends)."""
    return dg.DailyPartitionsDefinition(start_date=start, timezone="UTC", fmt="%Y-%m-%d")
