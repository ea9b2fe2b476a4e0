"""One landing day as the bounds a table engine can filter on (``tables.*_landing``): the instants of its two
midnights in the landing's time zone, or the date itself for a date column.

A landing table's rows are read a day at a time with the day's filter handed to the engine (Delta's and
Iceberg's file and row-group statistics, PostgreSQL's WHERE), so the filter must be a range on the stored
column, never a function of it: ``start <= ts < end``. The end is the next day's midnight computed as a
date, not ``start + 24 h``, so a day of a daylight-saving change has its 23 or 25 hours.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Final, Literal
from zoneinfo import ZoneInfo

import polars as pl

from faithfulness_pipeline.core.errors import InputError

#: How a timestamp column is compared: an instant (aware), a naive datetime (taken as UTC) or a date.
Stamp = Literal["instant", "naive", "date"]
#: The column the day of each row is computed into when days are listed.
_DAY: Final = "__fp_day"


@dataclass(frozen=True, slots=True)
class DayWindow:
    """``day`` in ``timezone``: rows whose timestamp is in ``[start, end)`` (aware, UTC); ``undated``: rows
    without a timestamp belong to this day too (it is the landing's ``undated_day``)."""

    day: date
    start: datetime
    end: datetime
    undated: bool

    def bounds(self, stamp: Stamp) -> tuple[object, object]:
        """The range's two ends as the column's values: aware instants, naive UTC datetimes, or the day and the
        next (a date column holds the day itself, whatever the time zone)."""
        if stamp == "instant":
            return self.start, self.end
        if stamp == "naive":
            return self.start.replace(tzinfo=None), self.end.replace(tzinfo=None)
        return self.day, self.day + timedelta(days=1)


def day_window(day: date, timezone: str, undated_day: date | None = None) -> DayWindow:
    zone = ZoneInfo(timezone)
    start = datetime.combine(day, time(), zone).astimezone(UTC)
    end = datetime.combine(day + timedelta(days=1), time(), zone).astimezone(UTC)
    return DayWindow(day, start, end, undated_day == day)


def stamp_of(dtype: pl.DataType, column: str, where: str) -> Stamp:
    """How ``column`` (of type ``dtype``, in the landing table ``where``) is compared; text or numbers cannot
    be filtered by range in the engine, so they are refused in one line naming the fix."""
    if isinstance(dtype, pl.Datetime):
        return "instant" if dtype.time_zone else "naive"
    if dtype == pl.Date:
        return "date"
    raise InputError(
        f"the landing table {where}'s timestamp column {column!r} has type {dtype}: a table landing's day is "
        f"filtered in the engine, which needs a timestamp or a date; store it as one (or, for PostgreSQL, cast "
        f"it in FP_LANDING_QUERY: SELECT *, {column}::timestamptz AS ...), or set FP_TIMESTAMP_COLUMN to another"
    )


def column_stamp(schema: pl.Schema, column: str, where: str, fix: str = "") -> Stamp:
    """``stamp_of`` the column, or one line naming FP_TIMESTAMP_COLUMN (and ``fix``, another way out) when the
    table has no such column."""
    if column not in schema:
        raise InputError(
            f"the landing table {where} has no timestamp column {column!r} (it has {', '.join(schema.names())}): "
            f"set FP_TIMESTAMP_COLUMN / landing.timestamp_column to the column that dates a row{fix}"
        )
    return stamp_of(schema[column], column, where)


def days_of(frames: Iterable[pl.DataFrame], column: str, stamp: Stamp, timezone: str,
            undated_day: date | None) -> set[date]:
    """The distinct days of ``column`` in ``frames`` (chunks holding that column, read one at a time), with
    ``undated_day`` when some row has no timestamp. For the engines read through Arrow (Delta, Iceberg)."""
    col = pl.col(column)
    if stamp == "date":
        of_day = col
    else:
        aware = col if stamp == "instant" else col.dt.replace_time_zone("UTC")
        of_day = aware.dt.convert_time_zone(timezone).dt.date()
    days: set[date] = set()
    undated = False
    for frame in frames:
        found = frame.select(of_day.alias(_DAY).unique()).get_column(_DAY)
        undated = undated or bool(found.null_count())
        days.update(d for d in found.to_list() if d is not None)
    if undated and undated_day is not None:
        days.add(undated_day)
    return days
