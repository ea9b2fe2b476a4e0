"""The table formats a warehouse can be written in, by name: the one place a new format is added.

Each entry builds the tables of a warehouse from its settings (``table_format.FormatSettings``: the root and what
a format needs of its own). A format whose library is heavy to import imports it inside its own methods, so
naming the formats stays cheap.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Final

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.tables.delta_tables import DeltaTables
from faithfulness_pipeline.tables.iceberg_tables import IcebergTables, iceberg_tables
from faithfulness_pipeline.tables.parquet_tables import ParquetTables
from faithfulness_pipeline.tables.postgres_tables import PostgresTables
from faithfulness_pipeline.tables.table_format import FormatSettings, TableFormat


def _postgres(settings: FormatSettings) -> TableFormat:
    return PostgresTables(settings.postgres_url, settings.postgres_schema, settings.version_retention_days)


#: Table formats by name, each built from the warehouse's settings (its root and the format's own fields).
TABLE_FORMATS: Final[dict[str, Callable[[FormatSettings], TableFormat]]] = {
    ParquetTables.name: lambda settings: ParquetTables(settings.root_place()),
    DeltaTables.name: lambda settings: DeltaTables(settings.root_place(), settings.version_retention_days),
    IcebergTables.name: iceberg_tables,
    PostgresTables.name: _postgres,
}
#: The library a format needs beyond the package's own, and the extra that installs it.
FORMAT_LIBRARIES: Final[dict[str, tuple[str, str]]] = {
    DeltaTables.name: ("deltalake", "delta"),
    IcebergTables.name: ("pyiceberg", "iceberg"),
}


def known_table_format(name: str) -> Callable[[FormatSettings], TableFormat]:
    """How the format ``name`` is built; an unknown name is one line naming the setting and the choices."""
    try:
        builder = TABLE_FORMATS[name]
    except KeyError:
        raise ConfigError(
            f"FP_TABLE_FORMAT / warehouse.table_format {name!r} is unknown: "
            f"use one of {', '.join(sorted(TABLE_FORMATS))}"
        ) from None
    library, extra = FORMAT_LIBRARIES.get(name, ("", ""))
    if library and importlib.util.find_spec(library) is None:
        raise ConfigError(f"FP_TABLE_FORMAT / warehouse.table_format {name!r} needs the {library} library, which is "
                          f"not installed: pip install 'faithfulness-pipeline[{extra}]'")
    return builder


def table_format(name: str, settings: FormatSettings) -> TableFormat:
    """The tables of the warehouse ``settings`` describe, in the format ``name``."""
    return known_table_format(name)(settings)
