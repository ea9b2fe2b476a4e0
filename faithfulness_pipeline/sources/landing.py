"""The landing location: which input files (Parquet, JSON Lines, CSV) are there, their days, and one day's
rows as a source (:class:`LandingDay`), as the Dagster assets read them; no Dagster here.

A row belongs to the calendar day of its timestamp column in the landing resource's time zone (UTC unless
``FP_TIMEZONE`` says otherwise; naive timestamps are UTC). A row without a timestamp (the table has no such
column, or the cell is null) belongs to its file's *arrival day*: the date of the file's modification time
in that zone, like ingestion-time partitioning in a warehouse. ``undated_day`` pins all
such rows to one fixed day instead (for a one-off import of an old, undated table).

Files may have different schemas (flat and chat shapes side by side): each is read on its own, as the CLI
reads them (``tables.read``, ``core.combine``). The landing location may be in an object store
(``s3://bucket/landing/``): listed and dated through ``tables.storage`` (an object's modification time is
when it was uploaded), its rows read by polars' scans, which take the URI as they take a path.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Final
from zoneinfo import ZoneInfo

import polars as pl
import pyarrow.parquet as pq

from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.sources.phoenix import is_phoenix
from faithfulness_pipeline.sources.source import Source
from faithfulness_pipeline.tables.inputs import PARQUET, input_format, resolve_inputs
from faithfulness_pipeline.tables.read import (
    READ_ERRORS,
    check_utf8,
    file_schema,
    parquet_batches,
    read_error,
    scan_input,
)
from faithfulness_pipeline.tables.storage import Place, StorageError, is_remote
from faithfulness_pipeline.traces.phoenix import PHOENIX_KEY_ENV
from faithfulness_pipeline.traces.staging import landed_spans, stage_phoenix_day

#: Where span exports of the landing are staged as conversation tables (one file per version of an export).
SPAN_CACHE: Final = os.path.join(tempfile.gettempdir(), "faithfulness-pipeline-spans")


@dataclass(frozen=True, slots=True)
class LandingFile:
    path: str
    mtime_ns: int
    size: int

    def arrival_day(self, timezone: str = "UTC") -> date:
        return datetime.fromtimestamp(self.mtime_ns / 1e9, tz=UTC).astimezone(ZoneInfo(timezone)).date()

    @property
    def fingerprint(self) -> str:
        return f"{self.path}|{self.mtime_ns}|{self.size}"


def _stat(path: str) -> LandingFile:
    info = Place.of(path).info()  # one request on an object store: size and time together
    return LandingFile(path, int(info.mtime_ns or 0), int(info.size or 0))


def list_landing(spec: str, day: date | None = None, timezone: str = "UTC") -> list[LandingFile]:
    """Every input file of the landing location, sorted by path; empty when there are none yet. A span export
    (docs/traces.md) is listed as its conversation table, staged once per version of the export in a local
    folder, with the export's time and size: the day's rows, checks and partitions are read from it like
    any table's. A Phoenix project (``phoenix+http://.../projects/NAME``) has no files: ``day``'s spans (its
    midnights in ``timezone``) are pulled into one table of that day; without a day there is nothing to list."""
    if is_phoenix(spec):
        return [] if day is None else [_phoenix_day(spec, day, timezone)]
    try:
        paths = resolve_inputs(spec, compressed=True)
    except InputError:
        if _exists(spec):
            return []  # an existing but empty landing folder is a normal state, not an error
        raise
    files = []
    for path in paths:
        file = _stat(path)
        staged = landed_spans(path, file.fingerprint, SPAN_CACHE)
        files.append(file if staged is None else LandingFile(staged, file.mtime_ns, file.size))
    return files


def _phoenix_day(spec: str, day: date, timezone: str) -> LandingFile:
    start = datetime.combine(day, time(), ZoneInfo(timezone))
    target = os.path.join(SPAN_CACHE, hashlib.sha256(f"{spec}|{day}|{timezone}".encode()).hexdigest()[:32] + ".parquet")
    stage_phoenix_day(spec, (start, start + timedelta(days=1)), target, os.environ.get(PHOENIX_KEY_ENV))
    return _stat(target)


def _exists(spec: str) -> bool:
    """Whether ``spec`` is a landing folder that exists (with no input files in it yet). An object store has
    no empty folders: a prefix without objects is an empty landing folder as long as its bucket exists."""
    if not is_remote(spec):
        return "://" not in spec and os.path.isdir(spec)
    if any(c in spec for c in "*?["):
        return False  # a pattern that matches nothing is a mistake, as it is locally
    try:
        place = Place.of(spec)
        while place.parent() != place:
            place = place.parent()
        return place.is_dir()
    except (StorageError, OSError):
        return False


def day_expr(schema: pl.Schema, column: str, path: str, timezone: str = "UTC") -> pl.Expr | None:
    """The date in ``timezone`` of each row's timestamp, or None when the file has no timestamp column."""
    if column not in schema:
        return None
    dtype = schema[column]
    col = pl.col(column)
    if isinstance(dtype, pl.Datetime):
        # A naive timestamp is taken to be UTC; an aware one keeps its instant.
        aware = col if dtype.time_zone else col.dt.replace_time_zone("UTC")
        return aware.dt.convert_time_zone(timezone).dt.date()
    if dtype == pl.Date:
        return col
    if dtype == pl.String:
        return col.str.to_datetime(time_zone="UTC", strict=True).dt.convert_time_zone(timezone).dt.date()
    raise InputError(
        f"timestamp column {column!r} in {path!r} has type {dtype}; expected a datetime, a date or ISO-8601 "
        f"text. Point the landing resource's timestamp_column at the right column."
    )


def _day_of(file: LandingFile, timestamp_column: str, undated_day: date | None, timezone: str) -> pl.Expr:
    """Each row's day: its timestamp's date in ``timezone``, else ``undated_day``, else the file's arrival day."""
    fallback = pl.lit(undated_day or file.arrival_day(timezone), dtype=pl.Date)
    expr = day_expr(file_schema(file.path), timestamp_column, file.path, timezone)
    return fallback if expr is None else expr.fill_null(fallback)


def _row_days(file: LandingFile, timestamp_column: str, undated_day: date | None, timezone: str) -> pl.LazyFrame:
    return scan_input(file.path).with_columns(_day_of(file, timestamp_column, undated_day, timezone).alias("__fp_day"))


def file_days(file: LandingFile, timestamp_column: str, undated_day: date | None, timezone: str = "UTC") -> set[date]:
    """The days that rows of ``file`` belong to (reads the timestamp column only)."""
    try:
        days = _row_days(file, timestamp_column, undated_day, timezone).select(pl.col("__fp_day").unique()).collect()
    except _TIMESTAMP_ERRORS as exc:
        raise _timestamp_error(file.path, timestamp_column, exc) from None
    return set(days.get_column("__fp_day").to_list())


#: What polars raises for timestamps it cannot read (text that is no date, an out-of-range value).
_TIMESTAMP_ERRORS = (pl.exceptions.InvalidOperationError, pl.exceptions.ComputeError)


def _timestamp_error(path: str, column: str, exc: Exception) -> InputError:
    """A clear error for a file whose day cannot be computed, naming bad timestamp values when there are some."""
    examples: list[str] = []
    try:
        text = scan_input(path).select(pl.col(column).cast(pl.String)).drop_nulls()
        bad = text.filter(pl.col(column).str.to_datetime(time_zone="UTC", strict=False).is_null())
        examples = bad.head(3).collect().get_column(column).to_list()
    except Exception:  # the examples only decorate the message: the error itself must get out
        examples = []
    detail = f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
    if not examples and "utf-8" in str(exc).lower():  # name the column, as the CLI does
        return _utf8_error(path) or InputError(f"{path!r} holds text that is not valid UTF-8 {detail}")
    if not examples:  # not the timestamps' fault: the rows themselves cannot be read
        fmt = input_format(path)
        return InputError(f"cannot read the rows of {path!r}: is the file complete and really {fmt}? {detail}")
    return InputError(
        f"cannot read the timestamps of {path!r}: column {column!r} holds values that are not ISO-8601 dates or "
        f"times (e.g. {examples}). Write them like 2026-11-25T12:00:00Z, or point the landing resource's "
        f"timestamp_column at another column. {detail}"
    )


def _utf8_error(path: str) -> InputError | None:
    """The error naming the column (and row) of ``path`` whose text is not valid UTF-8."""
    done = 0
    try:
        for batch in parquet_batches(pq.ParquetFile(Place.of(path).open_input()), 65536):
            check_utf8(batch, path, done)
            done += batch.num_rows
    except InputError as exc:
        return exc
    except Exception:  # only decorates the message
        return None
    return None


def rows_before(
    file: LandingFile, first_day: date, timestamp_column: str, undated_day: date | None, timezone: str = "UTC"
) -> int:
    """How many rows of ``file`` are dated before ``first_day`` (reads the timestamp column only)."""
    try:
        counted = (
            _row_days(file, timestamp_column, undated_day, timezone)
            .select((pl.col("__fp_day") < first_day).sum())
            .collect()
        )
    except _TIMESTAMP_ERRORS as exc:
        raise _timestamp_error(file.path, timestamp_column, exc) from None
    return int(counted.item() or 0)


def _parquet_day_frames(
    file: LandingFile, day: date, timestamp_column: str, undated_day: date | None, timezone: str, rows: int
) -> Iterator[pl.DataFrame]:
    """A Parquet file's rows of ``day``, at most ``rows`` rows at a time, read one row group at a time.

    Not polars' ``collect_batches``: that query runs to its end whatever the reader's pace, so the batches a
    slower reader (the judge, the writer) has not taken yet pile up, and memory grows with the day
    (BENCHMARKS.md, the Dagster day). A batch is read here when the previous one has been handed on."""
    schema = file_schema(file.path)
    of_day = _day_of(file, timestamp_column, undated_day, timezone) == day
    done = 0
    for batch in parquet_batches(pq.ParquetFile(Place.of(file.path).open_input()), rows):
        check_utf8(batch, file.path, done)  # polars would panic on such text, not raise
        done += batch.num_rows
        frame = pl.from_arrow(batch)
        assert isinstance(frame, pl.DataFrame)
        # polars' own reader and pyarrow's may name a type differently (a dictionary column, a large string):
        # the rows leave as the scan of the file types them, like those of every other format.
        yield frame.filter(of_day).cast(schema)


def day_batches(
    file: LandingFile, day: date, timestamp_column: str, undated_day: date | None, timezone: str, rows: int
) -> Iterator[pl.DataFrame]:
    """The file's rows of ``day`` in chunks of at most ``rows`` rows, columns as they are in the file: read by
    polars' streaming engine, so a file of any size passes in bounded memory. A file without rows that day
    gives one empty frame, so an empty day still has every column."""
    try:
        frames = (
            _parquet_day_frames(file, day, timestamp_column, undated_day, timezone, rows)
            if input_format(file.path) == PARQUET
            else _row_days(file, timestamp_column, undated_day, timezone)
            .filter(pl.col("__fp_day") == day)
            .drop("__fp_day")
            .collect_batches(chunk_size=rows)
        )
        empty = True
        for frame in frames:
            if frame.height:
                empty = False
                yield frame
        if empty:
            yield pl.DataFrame(schema=dict(file_schema(file.path)))
    except _TIMESTAMP_ERRORS as exc:
        raise _timestamp_error(file.path, timestamp_column, exc) from None
    except READ_ERRORS as exc:
        raise read_error(file.path, exc) from None


@dataclass(frozen=True, slots=True)
class LandingDay:
    """One day of the landing location ``location``: each file's rows dated ``day`` in ``timezone`` by their
    ``timestamp_column`` (rows without one: ``undated_day``, else the file's arrival day)."""

    location: str
    day: date
    timestamp_column: str
    undated_day: date | None = None
    timezone: str = "UTC"
    #: A landing table's own settings (``sources.table_landing``): a PostgreSQL table or query, an Iceberg catalog.
    query: str | None = None
    iceberg_catalog: str | None = None


@dataclass(frozen=True, slots=True)
class DayPart:
    """One landing file's rows of one day, in chunks of at most ``rows`` rows (:func:`day_batches`)."""

    file: LandingFile
    of: LandingDay
    rows: int

    @property
    def name(self) -> str:
        return self.file.path

    def schema(self) -> pl.Schema:
        return file_schema(self.file.path)

    def chunks(self) -> Iterator[pl.DataFrame]:
        day = self.of
        return day_batches(self.file, day.day, day.timestamp_column, day.undated_day, day.timezone, self.rows)

    def row_count(self) -> int | None:
        return None  # a file's rows of one day are known by reading its timestamps: nothing needs them ahead

    def rows_before(self, first_day: date) -> int:
        """Rows of the file dated before ``first_day`` (:func:`rows_before`)."""
        day = self.of
        return rows_before(self.file, first_day, day.timestamp_column, day.undated_day, day.timezone)


def day_source(day: LandingDay, rows: int) -> Source[DayPart]:
    """Every landing file's rows of the day, a part per file (:func:`list_landing`: a span export is read as
    its conversation table, staged in :data:`SPAN_CACHE`); a location with no input files is refused."""
    files = list_landing(day.location, day.day, day.timezone)
    if not files:
        raise InputError(f"the landing location {day.location!r} holds no Parquet, JSON Lines or CSV files yet")
    return Source([DayPart(file, day, rows) for file in files], files=[file.path for file in files])
