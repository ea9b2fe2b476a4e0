"""The table formats a warehouse can be written in, by name: the one place a new format is added.

Each entry builds the tables of a warehouse from its settings (``table_format.FormatSettings``: the root and what
a format needs of its own). A format whose library is heavy to import imports it inside its own methods, so
naming the formats stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.tables.iceberg_tables import IcebergTables, iceberg_tables
from faithfulness_pipeline.tables.parquet_tables import ParquetTables
from faithfulness_pipeline.tables.postgres_tables import PostgresTables
from faithfulness_pipeline.tables.table_format import FormatSettings, TableFormat


def _postgres(settings: FormatSettings) -> TableFormat:
    return PostgresTables(settings.postgres_url, settings.postgres_schema, settings.version_retention_days)


#: Table formats by name, each built from the warehouse's settings (its root and the format's own fields).
TABLE_FORMATS: Final[dict[str, Callable[[FormatSettings], TableFormat]]] = {
    ParquetTables.name: lambda settings: ParquetTables(settings.root_place()),
    IcebergTables.name: iceberg_tables,
    PostgresTables.name: _postgres,
}


def known_table_format(name: str) -> Callable[[FormatSettings], TableFormat]:
    """How the format ``name`` is built; an unknown name is one line naming the setting and the choices."""
    try:
        return TABLE_FORMATS[name]
    except KeyError:
        raise ConfigError(
            f"FP_TABLE_FORMAT / warehouse.table_format {name!r} is unknown: "
            f"use one of {', '.join(sorted(TABLE_FORMATS))}"
        ) from None


def table_format(name: str, settings: FormatSettings) -> TableFormat:
    """The tables of the warehouse ``settings`` describe, in the format ``name``."""
    return known_table_format(name)(settings)
