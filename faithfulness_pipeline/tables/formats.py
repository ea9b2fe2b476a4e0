"""The table formats a warehouse can be written in, by name: the one place a new format is added.

Each entry builds the tables of a warehouse root (``tables.table_format.TableFormat``). A format whose
library is heavy to import imports it inside its own methods, so naming the formats stays cheap.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Final, Protocol

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.tables.delta_tables import DeltaTables
from faithfulness_pipeline.tables.parquet_tables import ParquetTables
from faithfulness_pipeline.tables.storage import Place
from faithfulness_pipeline.tables.table_format import TableFormat


class WarehouseSettings(Protocol):
    """What the formats read of the warehouse's settings (``settings.landing.WarehouseSettings`` has it; the
    tables layer cannot import the settings layer)."""

    @property
    def version_retention_days(self) -> int: ...


#: How a format is built: the warehouse root and the warehouse's settings (a format takes what it needs).
FormatBuilder = Callable[[Place, WarehouseSettings | None], TableFormat]
#: The library a format needs beyond the package's own, and the extra that installs it.
FORMAT_LIBRARIES: Final[dict[str, tuple[str, str]]] = {DeltaTables.name: ("deltalake", "delta")}


def _parquet(root: Place, settings: WarehouseSettings | None) -> TableFormat:
    return ParquetTables(root)


def _delta(root: Place, settings: WarehouseSettings | None) -> TableFormat:
    return DeltaTables(root) if settings is None else DeltaTables(root, settings.version_retention_days)


#: Table formats by name.
TABLE_FORMATS: Final[dict[str, FormatBuilder]] = {
    ParquetTables.name: _parquet,
    DeltaTables.name: _delta,
}


def known_table_format(name: str) -> FormatBuilder:
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


def table_format(name: str, root: Place, settings: WarehouseSettings | None = None) -> TableFormat:
    """The tables of the warehouse at ``root`` in the format ``name`` (``settings``: the warehouse's, for a
    format's own settings such as the retention of versions; None: their defaults)."""
    return known_table_format(name)(root, settings)
