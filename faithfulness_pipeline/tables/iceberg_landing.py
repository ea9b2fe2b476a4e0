"""An Iceberg table in a SQL catalog as the landing (``sources.table_landing``): ``iceberg://NAMESPACE.TABLE``
(or ``iceberg://CATALOG/NAMESPACE.TABLE`` for a catalog name other than ``faithfulness``), its current
snapshot read a day at a time.

The day is a pyiceberg ``row_filter`` (a range on the timestamp column): planning keeps only the data files
whose partition values and column bounds may hold the day; each kept file is then read on its own
(``ArrowScan`` over one task), so memory holds one data file's rows of the day, never the whole day.
pyiceberg's own ``to_arrow_batch_reader`` is not used: 0.12 hands every file of the scan to a thread pool at
once and keeps each file's batches until it is read, so memory would grow with the day.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

import polars as pl

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.tables.day_window import DayWindow, Stamp, days_of
from faithfulness_pipeline.tables.iceberg_tables import CATALOG_NAME, _shown, catalog_uri, s3_properties
from faithfulness_pipeline.tables.read import rechunked
from faithfulness_pipeline.tables.storage import describe

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import DataScan, Table

SCHEME: Final = "iceberg://"
#: The setting naming the landing's catalog, as errors name it.
CATALOG_SETTING: Final = "FP_LANDING_ICEBERG_CATALOG / landing.iceberg_catalog"


def is_iceberg(spec: str) -> bool:
    return spec.startswith(SCHEME)


def identifier(spec: str) -> tuple[str, tuple[str, ...]]:
    """(catalog name, (namespace..., table)) of ``iceberg://[CATALOG/]NAMESPACE.TABLE``; anything else is one line
    showing the form."""
    parts = urlsplit(spec)
    catalog, dotted = (parts.netloc, parts.path.lstrip("/")) if parts.path.strip("/") else (CATALOG_NAME,
                                                                                              parts.netloc)
    names = tuple(dotted.split("."))
    if len(names) < 2 or not all(names) or not catalog:
        raise ConfigError(f"FP_LANDING {spec!r} names no Iceberg table: write iceberg://NAMESPACE.TABLE (or "
                          f"iceberg://CATALOG/NAMESPACE.TABLE when the SQL catalog's name is not {CATALOG_NAME})")
    return catalog, names


def required_catalog(spec: str, catalog: str | None) -> str:
    """The landing's catalog setting, or one line saying it is needed."""
    if not catalog:
        raise ConfigError(f"FP_LANDING {spec} is an Iceberg table, and {CATALOG_SETTING} is unset: set it to the SQL "
                          f"catalog holding it (sqlite:////path/catalog.sqlite or postgresql://user@host/db)")
    return catalog


def _between(column: str, low: object, high: object, undated: bool) -> BooleanExpression:
    from pyiceberg.expressions import And, GreaterThanOrEqual, IsNull, LessThan, Or

    # ISO text: pyiceberg turns a string literal into the column's own type (timestamptz, timestamp, date). The
    # predicates are pydantic models whose own __init__ takes (term, literal); mypy sees only the fields.
    text_low, text_high = _iso(low), _iso(high)
    in_day: BooleanExpression = And(GreaterThanOrEqual(column, text_low),  # type: ignore[call-arg, arg-type]
                                    LessThan(column, text_high))  # type: ignore[call-arg, arg-type]
    return Or(in_day, IsNull(column)) if undated else in_day  # type: ignore[call-arg, arg-type]


def _iso(value: object) -> str:
    assert isinstance(value, date)  # a datetime is a date too
    return value.isoformat()


class IcebergLanding:
    """The table ``spec`` names, in the SQL catalog at ``catalog`` (a SQLAlchemy URI)."""

    def __init__(self, spec: str, catalog: str | None) -> None:
        from pyiceberg.catalog.sql import SqlCatalog
        from pyiceberg.exceptions import NoSuchTableError
        from sqlalchemy.exc import SQLAlchemyError

        name, names = identifier(spec)
        uri = catalog_uri("", required_catalog(spec, catalog))
        try:
            self._table: Table = SqlCatalog(name, uri=uri, **dict(s3_properties())).load_table(names)
        except NoSuchTableError:
            raise ConfigError(f"FP_LANDING {spec}: the catalog {_shown(uri)} has no table {'.'.join(names)} "
                              f"(catalog name {name!r}): check the name, or {CATALOG_SETTING}") from None
        except (SQLAlchemyError, OSError, ValueError) as exc:
            raise ConfigError(f"{CATALOG_SETTING} {_shown(uri)}: the Iceberg catalog cannot be reached "
                              f"({_shown(describe(exc))[:300]}): check the URI and that its database runs") from None

    @property
    def version(self) -> int | None:
        snapshot = self._table.current_snapshot()
        return None if snapshot is None else int(snapshot.snapshot_id)

    def schema(self) -> pl.Schema:
        frame = pl.from_arrow(self._table.schema().as_arrow().empty_table())
        assert isinstance(frame, pl.DataFrame)
        return frame.schema

    def days(self, column: str, stamp: Stamp, timezone: str, undated_day: date | None) -> set[date]:
        if self.version is None:  # a table without a snapshot has no rows
            return set()
        return days_of(self._frames(self._table.scan(selected_fields=(column,))), column, stamp, timezone,
                       undated_day)

    def day_batches(self, column: str, stamp: Stamp, window: DayWindow, rows: int) -> Iterator[pl.DataFrame]:
        low, high = window.bounds(stamp)
        scan = self._table.scan(row_filter=_between(column, low, high, window.undated))
        yield from rechunked(self._frames(scan), rows)

    @staticmethod
    def _frames(scan: DataScan) -> Iterator[pl.DataFrame]:
        """The scan's rows, one planned data file at a time (see the module's docstring)."""
        from pyiceberg.io.pyarrow import ArrowScan

        projected = scan.projection()
        for task in scan.plan_files():
            reader = ArrowScan(table_metadata=scan.table_metadata, io=scan.io, projected_schema=projected,
                               row_filter=scan.row_filter, case_sensitive=scan.case_sensitive)
            for batch in reader.to_record_batches([task]):
                if batch.num_rows:
                    frame = pl.from_arrow(batch)
                    assert isinstance(frame, pl.DataFrame)
                    yield frame

    def rows_before(self, column: str, stamp: Stamp, window: DayWindow) -> int:
        from pyiceberg.expressions import LessThan

        if self.version is None:
            return 0
        low, _ = window.bounds(stamp)
        before = LessThan(column, _iso(low))  # type: ignore[call-arg, arg-type]
        return int(self._table.scan(row_filter=before).count())
