"""The warehouse a reading command (``report``, ``compare``, ``estimate``) takes, in any table format.

Its options are the warehouse settings that name a flag (``--table-format``, ``--iceberg-catalog``,
``--iceberg-namespace``, ``--postgres-url``, ``--postgres-schema``: ``settings.landing.WarehouseSettings``), built
by ``cli.options.setting_options`` from that one declaration, so a flag, its ``FP_*`` variable and the Dagster
resource field are one setting. ``--as-of`` (a ``table_version`` a materialisation recorded) is the command's own.

Which argument is a warehouse: with ``--table-format`` on the command line, every one (a warehouse root: the
folder or URI ``FP_WAREHOUSE`` names for the Dagster layer; the postgres format's tables are in
``--postgres-url``); otherwise a folder holding a ``scored_conversations`` table (a folder of Delta tables is
read as Delta), or any folder when ``FP_TABLE_FORMAT`` names another format than parquet. Anything else is a
scored table (files, folders, globs), read as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import click
import polars as pl

from faithfulness_pipeline.cli.options import setting_options
from faithfulness_pipeline.core.errors import ConfigError, InputError
from faithfulness_pipeline.report.data import SCORED_TABLE, WarehouseTables
from faithfulness_pipeline.settings.derive import from_env, settings
from faithfulness_pipeline.settings.landing import WarehouseSettings
from faithfulness_pipeline.tables.delta_tables import DELTA_LOG, DeltaTables
from faithfulness_pipeline.tables.formats import table_format
from faithfulness_pipeline.tables.parquet_tables import ParquetTables
from faithfulness_pipeline.tables.storage import Place

#: ``--as-of``'s help: what a version is in each format that keeps them.
AS_OF_HELP = ("Read the warehouse's scored table as of this table_version, as a materialisation recorded it (a "
              "Delta version, an Iceberg snapshot id, a PostgreSQL load id); the parquet format keeps none.")


def warehouse_options(command: Callable[..., None]) -> Callable[..., None]:
    """The warehouse settings that name a flag, as options (derived, never declared here)."""
    return setting_options(WarehouseSettings)(command)


def _given(options: Mapping[str, Any]) -> dict[str, Any]:
    """The warehouse settings given as flags (taken out of ``options``, which holds the command's others too)."""
    return {s.name: options[s.name] for s in settings(WarehouseSettings) if options.get(s.name) is not None}


def _settings(env: Mapping[str, str], given: dict[str, Any], chosen: bool) -> WarehouseSettings:
    try:
        return from_env(WarehouseSettings, env, given)
    except ConfigError as exc:  # an unknown format, a catalog with no place: name the flag where it was given
        text = str(exc)
        raise ConfigError(f"--table-format / {text}" if chosen and text.startswith("FP_TABLE_FORMAT") else text
                          ) from None


def _is_folder(spec: str) -> bool:
    return not any(c in spec for c in "*?[") and Place.of(spec).is_dir()


def open_warehouse(spec: str | None, options: Mapping[str, Any], env: Mapping[str, str],
                   as_of: str | None = None) -> tuple[str, WarehouseTables | None]:
    """What ``spec`` names (see the module docstring): where it is, and its tables when it is a warehouse (None: a
    scored table). ``spec`` None: the warehouse ``FP_WAREHOUSE`` names. ``as_of`` given for a scored table, or for a
    warehouse in a format without versions, is one line saying so."""
    given = _given(options)
    chosen = "table_format" in given
    warehouse = _settings(env, given, chosen)
    name = warehouse.table_format
    if spec is not None and not chosen:
        folder = _is_folder(spec)
        holds = folder and Place.of(spec).child(SCORED_TABLE).is_dir()
        if not (holds or (folder and name != ParquetTables.name)):
            if as_of is not None:
                raise InputError(f"--as-of {as_of} reads a past version of a warehouse, and {spec!r} is a scored "
                                 "table (files) with no versions: give a warehouse (with --table-format)")
            return spec, None
        if name == ParquetTables.name and Place.of(spec).child(SCORED_TABLE, DELTA_LOG).is_dir():
            name = DeltaTables.name  # written before FP_TABLE_FORMAT was set here: its log says what it is
    if spec is not None:
        warehouse = _settings(env, {**given, "root": spec}, chosen)
    tables = table_format(name, warehouse)
    if as_of is not None and name == ParquetTables.name:
        raise ConfigError(f"--as-of {as_of}: the warehouse {warehouse.root!r} is in the parquet table format, which "
                          "keeps no versions: give --table-format of a format with versions (delta, iceberg, postgres)")
    return warehouse.root, WarehouseTables(tables, as_of)


def scored_scan(where: str, warehouse: WarehouseTables) -> pl.LazyFrame:
    """Every day of the warehouse's scored table as one lazy frame (the day is no column, as in a scored table)."""
    return warehouse.tables.scan(SCORED_TABLE, warehouse.days(where), warehouse.as_of)


def as_of_option(*names: str, help_text: str = AS_OF_HELP) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``--as-of VERSION`` (or another name): the command's own, as no setting holds a version."""
    return click.option(*names, default=None, metavar="VERSION", help=help_text)
