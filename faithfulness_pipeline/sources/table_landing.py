"""A table as the landing: a Delta table, an Iceberg table or a PostgreSQL table or query holds the
conversations, and each day's rows are read from it with the day's filter pushed down to its engine, so a
team that logs to its warehouse needs no export step.

``LANDING_KINDS`` is the one place a kind is declared: how ``FP_LANDING`` names it, the reader that opens it
(``tables.*_landing``) and the library it needs; the settings' checks, ``open_source`` and the docs read it.
A kind's reader says its schema, the distinct days of the timestamp column (computed by the engine, not
from files), one day's rows in chunks of bounded size, and how many rows are dated before a day.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date
from typing import Final, Protocol

import polars as pl

from faithfulness_pipeline.core.errors import ConfigError, InputError
from faithfulness_pipeline.sources.landing import LandingDay, LandingFile, file_days, list_landing
from faithfulness_pipeline.sources.phoenix import is_phoenix
from faithfulness_pipeline.sources.source import Source
from faithfulness_pipeline.tables.day_window import DayWindow, Stamp, column_stamp, day_window
from faithfulness_pipeline.tables.delta_landing import DeltaLanding, is_delta_table
from faithfulness_pipeline.tables.iceberg_landing import IcebergLanding, identifier, is_iceberg, required_catalog
from faithfulness_pipeline.tables.postgres_connect import is_postgres_url
from faithfulness_pipeline.tables.postgres_landing import QUERY_SETTING, PostgresLanding, relation
from faithfulness_pipeline.tables.storage import REMOTE_SCHEMES
from faithfulness_pipeline.traces.urls import scrubbed


class LandingTable(Protocol):
    """What a landing kind's reader does (``tables.delta_landing``, ``iceberg_landing``, ``postgres_landing``)."""

    def schema(self) -> pl.Schema: ...

    def days(self, column: str, stamp: Stamp, timezone: str, undated_day: date | None) -> set[date]: ...

    def day_batches(self, column: str, stamp: Stamp, window: DayWindow, rows: int) -> Iterator[pl.DataFrame]: ...

    def rows_before(self, column: str, stamp: Stamp, window: DayWindow) -> int: ...


@dataclass(frozen=True, slots=True)
class TableSettings:
    """What opening a landing table takes: its location (``FP_LANDING``) and a kind's own settings."""

    location: str
    query: str | None = None
    iceberg_catalog: str | None = None


@dataclass(frozen=True, slots=True)
class LandingKind:
    """One kind of landing table: ``named`` tells it by ``FP_LANDING`` (a scheme, or a Delta log under the
    path); ``check`` refuses its settings before anything is opened; ``library``: (module, extra)."""

    name: str
    form: str
    named: Callable[[str], bool]
    open: Callable[[TableSettings], LandingTable]
    check: Callable[[TableSettings], None]
    library: tuple[str, str] | None = None
    #: Told by the location's text alone (a scheme); False: by looking (a Delta log), which the settings' check
    #: at load time does not do (an object store would be asked at every load of the code location).
    by_name: bool = True


def _check_postgres(settings: TableSettings) -> None:
    relation(settings.query, settings.location)


def _check_iceberg(settings: TableSettings) -> None:
    identifier(settings.location)
    required_catalog(settings.location, settings.iceberg_catalog)


#: Every kind of landing table, told apart in this order (the schemes before the Delta log, which is looked for).
LANDING_KINDS: Final[tuple[LandingKind, ...]] = (
    LandingKind("postgres", "postgresql://user:password@host:5432/db, with FP_LANDING_QUERY a table or a SELECT",
                is_postgres_url, lambda s: PostgresLanding(s.location, s.query), _check_postgres),
    LandingKind("iceberg", "iceberg://NAMESPACE.TABLE, with FP_LANDING_ICEBERG_CATALOG the SQL catalog", is_iceberg,
                lambda s: IcebergLanding(s.location, s.iceberg_catalog), _check_iceberg, ("pyiceberg", "iceberg")),
    LandingKind("delta", "a folder or object-store URI holding a Delta table (_delta_log)", is_delta_table,
                lambda s: DeltaLanding(s.location), lambda s: None, ("deltalake", "delta"), by_name=False),
)


def landing_kind(location: str) -> LandingKind | None:
    """The kind of table ``location`` is, or None for files (and a Phoenix project)."""
    return next((kind for kind in LANDING_KINDS if kind.named(location)), None)


def check_landing(settings: TableSettings) -> None:
    """Refuses, in one line naming the fix, what no landing can be: a scheme no kind knows, a table kind without
    its settings or its library. Opens nothing: a Delta table is told (and checked) when a day is read."""
    location = settings.location
    scheme = location.split("://", 1)[0].lower() if "://" in location else ""
    kind = next((k for k in LANDING_KINDS if k.by_name and k.named(location)), None)
    if scheme and scheme not in REMOTE_SCHEMES and scheme != "file" and not is_phoenix(location) and kind is None:
        forms = "; ".join(f"{k.name}: {k.form}" for k in LANDING_KINDS)
        raise ConfigError(f"FP_LANDING / landing.path {scrubbed(location)!r} is no landing kind: use files (a file, "
                          f"folder or glob, local or {', '.join(s + '://' for s in REMOTE_SCHEMES[:2])}...), a Phoenix "
                          f"project (phoenix+http://...) or a table ({forms})")
    if kind is not None:
        _check_kind(kind, settings)


def _check_kind(kind: LandingKind, settings: TableSettings) -> None:
    if kind.library and importlib.util.find_spec(kind.library[0]) is None:
        raise ConfigError(f"FP_LANDING / landing.path is a {kind.name} table, which needs the {kind.library[0]} "
                          f"library: pip install 'faithfulness-pipeline[{kind.library[1]}]'")
    kind.check(settings)


@dataclass(frozen=True)
class OpenTable:
    """A landing table, opened and checked: its reader, how its timestamp column compares, its shown name."""

    table: LandingTable
    stamp: Stamp
    name: str
    kind: str


def open_table(kind: LandingKind, settings: TableSettings, column: str) -> OpenTable:
    """The table ``settings`` names, opened (an unreachable database or catalog, a missing table, a missing or
    untyped timestamp column: one line naming the fix)."""
    _check_kind(kind, settings)
    name = f"{kind.name} {scrubbed(settings.location)}"
    try:
        table = kind.open(settings)
        fix = f", or select it in {QUERY_SETTING}" if kind.name == "postgres" else ""
        stamp = column_stamp(table.schema(), column, name, fix)
    except (ConfigError, InputError) as exc:  # a library's message may quote the URL with its password
        raise type(exc)(scrubbed(str(exc))) from None
    return OpenTable(table, stamp, name, kind.name)


def table_days(kind: LandingKind, settings: TableSettings, column: str, timezone: str,
               undated_day: date | None) -> set[date]:
    """The distinct days of the table's timestamp column in ``timezone`` (``undated_day`` when some row has none)."""
    opened = open_table(kind, settings, column)
    return opened.table.days(column, opened.stamp, timezone, undated_day)


def landing_days(settings: TableSettings, column: str, timezone: str, undated_day: date | None) -> set[date]:
    """Every day the landing has rows for: a table's from its engine, files' from their timestamps."""
    kind = landing_kind(settings.location)
    if kind is not None:
        return table_days(kind, settings, column, timezone, undated_day)
    return {d for f in list_landing(settings.location) for d in file_days(f, column, undated_day, timezone)}


@dataclass(frozen=True, slots=True)
class TablePart:
    """The landing table's rows of one day: the source's one part. ``file`` stands for the table where the
    load's checks name files (its shown name; a table has no modification time or size)."""

    opened: OpenTable
    of: LandingDay
    rows: int

    @property
    def name(self) -> str:
        return self.opened.name

    @property
    def file(self) -> LandingFile:
        return LandingFile(self.opened.name, 0, 0)

    def schema(self) -> pl.Schema:
        return self.opened.table.schema()

    def chunks(self) -> Iterator[pl.DataFrame]:
        day = self.of
        window = day_window(day.day, day.timezone, day.undated_day)
        empty = True
        for frame in self.opened.table.day_batches(day.timestamp_column, self.opened.stamp, window, self.rows):
            if frame.height:
                empty = False
                yield frame
        if empty:  # a day without rows still has every column, as a file's does
            yield pl.DataFrame(schema=dict(self.schema()))

    def row_count(self) -> int | None:
        return None  # the engine counts them only by running the day's query

    def rows_before(self, first_day: date) -> int:
        """Rows dated before ``first_day`` (counted by the engine)."""
        day = self.of
        window = day_window(first_day, day.timezone)
        return self.opened.table.rows_before(day.timestamp_column, self.opened.stamp, window)


def table_day_source(day: LandingDay, kind: LandingKind, rows: int) -> Source[TablePart]:
    """The landing table's rows of ``day`` as a source of one part."""
    settings = TableSettings(day.location, day.query, day.iceberg_catalog)
    opened = open_table(kind, settings, day.timestamp_column)
    return Source([TablePart(opened, day, rows)], files=[opened.name])
