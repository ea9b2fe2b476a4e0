"""Daily partitions on the conversations' timestamp, in one time zone (UTC unless FP_TIMEZONE says otherwise)."""

from __future__ import annotations

import dagster as dg

#: First day of the sample data; set FP_PARTITIONS_START for your own tables.
DEFAULT_START = "2026-11-24"


def daily_partitions(start: str = DEFAULT_START, timezone: str = "UTC") -> dg.DailyPartitionsDefinition:
    """One partition per day of ``timezone`` from ``start`` to yesterday (today's opens when the day ends)."""
    return dg.DailyPartitionsDefinition(start_date=start, timezone=timezone, fmt="%Y-%m-%d")
