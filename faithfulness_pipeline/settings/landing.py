"""The Dagster layer's settings: where conversations land, where the warehouse is, the first daily partition.

They are no flags of ``score`` or ``calibrate`` (the registry in ``derive`` says so); they are ``FP_*`` variables
and, but for the first partition, the Dagster ``landing`` and ``warehouse`` resource fields. A few name the flag of
the commands that read what the Dagster layer writes: ``report``'s own ``--timezone``, and the table format and
its place (``--table-format``, ``--postgres-url``, ...), which ``report``, ``compare`` and ``estimate`` take to read
a warehouse (``cli/warehouse.py`` builds those options from these fields). Their variables predate these
models, so fields whose variable is not ``FP_`` and the field name in capitals name it (``fields.variable``).
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, Field, field_validator, model_validator

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.settings.fields import flag, variable
from faithfulness_pipeline.settings.model_config import SETTINGS_CONFIG
from faithfulness_pipeline.sources.table_landing import TableSettings, check_landing
from faithfulness_pipeline.tables.formats import known_table_format
from faithfulness_pipeline.tables.iceberg_tables import catalog_uri
from faithfulness_pipeline.tables.storage import Place

#: The sample data's first day.
DEFAULT_PARTITIONS_START: Final = "2026-11-24"


class LandingSettings(BaseModel):
    """Where raw conversations land and how a row's day is read from them."""

    model_config = SETTINGS_CONFIG

    path: str = Field(
        default="sample_data",
        description="landing location: a Parquet, JSON Lines or CSV file, a folder (every such file below it) or a "
        "glob; local or an object-store URI (relative paths resolve from the working directory); span exports "
        "among them are read as conversations, and a Phoenix project (phoenix+http://host:6006/projects/NAME) "
        "gives each day its spans (docs/traces.md); or a table, each day read with its filter pushed down: a "
        "Delta table's folder or URI, iceberg://NAMESPACE.TABLE, or postgresql://user:password@host/db "
        "(docs/table-formats.md)",
        json_schema_extra=variable("FP_LANDING"),
    )
    query: str | None = Field(
        default=None,
        description="for a PostgreSQL landing: the table holding the conversations (schema.table) or a SELECT "
        "over them; the day's WHERE on the timestamp column is added around it, with the day's bounds as "
        "parameters",
        json_schema_extra=variable("FP_LANDING_QUERY"),
    )
    iceberg_catalog: str | None = Field(
        default=None,
        description="for an iceberg:// landing: the SQL catalog holding the table, a SQLAlchemy URI "
        "(sqlite:////path/catalog.sqlite or postgresql://user@host/db); shown without its password",
        json_schema_extra=variable("FP_LANDING_ICEBERG_CATALOG"),
    )
    timestamp_column: str = Field(
        default="created_at",
        description="column whose date (in timezone) picks a row's daily partition (datetime, date or ISO-8601 text; "
        "in a landing table a timestamp or a date, which the day's filter is a range on)",
    )
    required_columns: list[str] = Field(
        default_factory=list,
        description="columns every landing file must have, else the input_schema check fails (comma-separated)",
    )
    undated_day: str | None = Field(
        default=None,
        description="day (YYYY-MM-DD) for rows without a timestamp (unset: the day, in timezone, the file arrived: "
        "its modification time; a landing table's rows without one are then read on no day)",
    )
    timezone: str = Field(
        default="UTC",
        description="IANA time zone of the day boundary (UTC, Europe/Berlin, Asia/Seoul): a row's day is its "
        "timestamp's date there (naive timestamps are UTC); the daily partitions, the schedule and the report "
        "command follow it (its own --timezone beats the variable there); set it with FP_TIMEZONE, as the "
        "partitions are fixed when the code location loads",
        # report declares this flag itself (cli/report.py); naming it here keeps the table true.
        json_schema_extra=flag("--timezone"),
    )

    @model_validator(mode="after")
    def _known_landing(self) -> LandingSettings:
        # An unknown kind, or a table kind without its own settings, is refused when the code location loads.
        check_landing(TableSettings(self.path, self.query, self.iceberg_catalog))
        return self

    def zone(self) -> str:
        """``timezone``, checked: a name that is no time zone is one line naming FP_TIMEZONE."""
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(
                f"FP_TIMEZONE / landing.timezone {self.timezone!r} is not a time zone name (e.g. UTC, Asia/Seoul)"
            ) from None
        return self.timezone

    def undated(self) -> date | None:
        if not self.undated_day:
            return None
        try:
            return date.fromisoformat(self.undated_day)
        except ValueError as exc:
            raise ConfigError(f"undated_day must be YYYY-MM-DD, got {self.undated_day!r}") from exc


class WarehouseSettings(BaseModel):
    """Where tables, the BI database and the report are written."""

    model_config = SETTINGS_CONFIG

    root: str = Field(
        default="warehouse",
        description="warehouse folder: local (or mounted; relative paths resolve from the working directory) or an "
        "object-store URI (s3://bucket/warehouse; docs/object-storage.md)",
        json_schema_extra=variable("FP_WAREHOUSE"),
    )
    duckdb_path: str | None = Field(
        default=None, description="DuckDB file with the BI views, a path or a URI (unset: "
        "<root>/answer_quality.duckdb)",
        json_schema_extra=variable("FP_DUCKDB"),
    )
    report_path: str | None = Field(
        default=None, description="the HTML answer-quality report, a path or a URI (unset: "
        "<root>/answer_quality_report.html)",
        json_schema_extra=variable("FP_REPORT"),
    )

    table_format: str = Field(
        default="parquet",
        description="the warehouse's table format: parquet (folders of day-partitioned Parquet files), delta "
        "(Delta Lake tables), iceberg (Apache Iceberg tables in the SQL catalog FP_ICEBERG_CATALOG), postgres "
        "(tables in the database FP_POSTGRES_URL); docs/table-formats.md",
        json_schema_extra={**variable("FP_TABLE_FORMAT"), **flag("--table-format")},
    )
    postgres_url: str | None = Field(
        default=None,
        description="the database of the postgres table format: postgresql://user:password@host:5432/db (a Unix "
        "socket folder as ?host=/folder); required when table_format is postgres; shown without its password",
        json_schema_extra={**variable("FP_POSTGRES_URL"), **flag("--postgres-url")},
    )
    postgres_schema: str = Field(
        default="faithfulness",
        description="the PostgreSQL schema the postgres table format keeps the tables, their loads and the BI "
        "views in (created when absent)",
        json_schema_extra={**variable("FP_POSTGRES_SCHEMA"), **flag("--postgres-schema")},
    )
    version_retention_days: int = Field(
        default=30, ge=1, le=3650,
        description="days a format with versions (delta, iceberg, postgres) keeps a replaced version readable "
        "(reading as of a materialisation's table_version) before its data may be removed",
        json_schema_extra=variable("FP_VERSION_RETENTION_DAYS"),
    )
    iceberg_catalog: str | None = Field(
        default=None,
        description="the iceberg format's SQL catalog, a SQLAlchemy URI: sqlite:////path/catalog.sqlite or "
        "postgresql://user@host/db (unset: <root>/_iceberg_catalog.sqlite; required for a root in an object store)",
        json_schema_extra={**variable("FP_ICEBERG_CATALOG"), **flag("--iceberg-catalog")},
    )
    iceberg_namespace: str = Field(
        default="faithfulness",
        description="the iceberg format's namespace (database) in its catalog, holding every table",
        json_schema_extra={**variable("FP_ICEBERG_NAMESPACE"), **flag("--iceberg-namespace")},
    )

    segment_columns: list[str] = Field(
        default_factory=lambda: ["app_version"],
        description="columns of the scored rows (an app or prompt version that landed with them) whose groups the "
        "daily_model_comparison table compares too, each against its first value, on the days they are present "
        "(comma-separated; the answering model's column always)",
        json_schema_extra=variable("FP_SEGMENT_COLUMNS"),
    )

    @field_validator("table_format")
    @classmethod
    def _known_format(cls, name: str) -> str:
        known_table_format(name)
        return name

    @model_validator(mode="after")
    def _iceberg_catalog_where_needed(self) -> WarehouseSettings:
        if self.table_format == "iceberg":  # its catalog has no default place in an object store: say so now
            catalog_uri(self.root, self.iceberg_catalog)
        return self

    def root_place(self) -> Place:
        return Place.of(self.root)

    def duckdb_place(self) -> Place:
        return Place.of(self.duckdb_path) if self.duckdb_path else self.root_place().child(DUCKDB_FILE)

    def report_place(self) -> Place:
        return Place.of(self.report_path) if self.report_path else self.root_place().child(REPORT_FILE)

    def root_path(self) -> Path:
        """The root as a local path (``root_place`` for one that may be in an object store)."""
        return _local(self.root_place(), "FP_WAREHOUSE / warehouse.root", "root_place")

    def duckdb_file(self) -> Path:
        return _local(self.duckdb_place(), "FP_DUCKDB / warehouse.duckdb_path", "duckdb_place")

    def report_file(self) -> Path:
        return _local(self.report_place(), "FP_REPORT / warehouse.report_path", "report_place")


#: The BI database's and the report's file names in the warehouse root, unless set.
DUCKDB_FILE: Final = "answer_quality.duckdb"
REPORT_FILE: Final = "answer_quality_report.html"


def _local(place: Place, setting: str, instead: str) -> Path:
    """``place`` as a local path; a place in an object store is one line naming the setting, not a path such
    as ``./s3:/bucket/...`` (which ``Path`` would make of a URI)."""
    if place.remote:
        raise ConfigError(f"{setting} is {place.uri}, in an object store: this caller needs a local path "
                          f"(WarehouseSettings.{instead}() gives the place)")
    return place.local_path()


class PartitionSettings(BaseModel):
    """The daily partitions' first day. The partitions are built once, when the code location loads, so this is
    no resource field: a value in the launchpad could not change them."""

    model_config = SETTINGS_CONFIG

    partitions_start: str = Field(
        default=DEFAULT_PARTITIONS_START,
        description="first daily partition (YYYY-MM-DD; the default is the sample data's first day)",
    )
