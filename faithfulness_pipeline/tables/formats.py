"""The table formats a warehouse can be written in, by name: the one place a new format is added.

Each entry builds the tables of a warehouse from its settings (``WarehouseFields``: the root and what a format
needs of its own). A format whose library is heavy to import imports it inside its own methods, so naming the
formats stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.tables.parquet_tables import ParquetTables
from faithfulness_pipeline.tables.postgres_tables import PostgresTables
from faithfulness_pipeline.tables.storage import Place
from faithfulness_pipeline.tables.table_format import TableFormat


class WarehouseFields(Protocol):
    """What a format is built from: the ``WarehouseSettings`` fields (``settings.landing``; this layer is below
    the settings, so it names them instead of importing them)."""

    @property
    def root(self) -> str: ...

    @property
    def version_retention_days(self) -> int: ...

    @property
    def postgres_url(self) -> str | None: ...

    @property
    def postgres_schema(self) -> str: ...


def _parquet(fields: WarehouseFields) -> TableFormat:
    return ParquetTables(Place.of(fields.root))


def _postgres(fields: WarehouseFields) -> TableFormat:
    return PostgresTables(fields.postgres_url, fields.postgres_schema, fields.version_retention_days)


#: Table formats by name.
TABLE_FORMATS: Final[dict[str, Callable[[WarehouseFields], TableFormat]]] = {
    ParquetTables.name: _parquet,
    PostgresTables.name: _postgres,
}


def known_table_format(name: str) -> Callable[[WarehouseFields], TableFormat]:
    """How the format ``name`` is built; an unknown name is one line naming the setting and the choices."""
    try:
        return TABLE_FORMATS[name]
    except KeyError:
        raise ConfigError(
            f"FP_TABLE_FORMAT / warehouse.table_format {name!r} is unknown: "
            f"use one of {', '.join(sorted(TABLE_FORMATS))}"
        ) from None


def table_format(name: str, fields: WarehouseFields) -> TableFormat:
    """The tables of the warehouse ``fields`` describe, in the format ``name``."""
    return known_table_format(name)(fields)
