"""``TableFormat.partitions`` in every format: the days a table has, now and as of a version; a table without
days; a table never written; a version that is none refused as ``scan`` refuses it."""

from __future__ import annotations

import itertools
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.tables.delta_tables import DeltaTables
from faithfulness_pipeline.tables.iceberg_tables import IcebergTables, catalog_uri
from faithfulness_pipeline.tables.parquet_tables import ParquetTables
from faithfulness_pipeline.tables.postgres_tables import PostgresTables
from faithfulness_pipeline.tables.storage import Place
from faithfulness_pipeline.tables.table_format import TableFormat
from tests.postgres_cluster import Cluster

_DATABASES = itertools.count()


@pytest.fixture(params=["parquet", "delta", "iceberg", "postgres"])
def tables(request: pytest.FixtureRequest, tmp_path: Path) -> TableFormat:
    root = Place.of(str(tmp_path / "wh"))
    if request.param == "parquet":
        return ParquetTables(root)
    if request.param == "delta":
        return DeltaTables(root)
    if request.param == "iceberg":
        return IcebergTables(root, catalog_uri(str(tmp_path / "wh"), None), "faithfulness")
    cluster: Cluster = request.getfixturevalue("postgres")
    database = f"partitions_{next(_DATABASES)}"
    cluster.psql(f"CREATE DATABASE {database}")
    return PostgresTables(cluster.url(database=database))


def _write(tables: TableFormat, table: str, day: str | None, value: int) -> str | None:
    with tables.writer(table, day) as sink:
        sink.write(pl.DataFrame({"a": [value]}))
    return sink.committed


def test_the_days_a_table_has_now_and_as_of_a_version(tables: TableFormat) -> None:
    assert tables.partitions("t") == []  # never written
    first = _write(tables, "t", "2026-11-25", 1)
    _write(tables, "t", "2026-11-24", 2)
    _write(tables, "t", "2026-11-25", 3)  # a day replaced is still one day
    assert tables.partitions("t") == ["2026-11-24", "2026-11-25"]
    _write(tables, "labels", None, 4)
    assert tables.partitions("labels") == [None]
    assert tables.partitions("t") == ["2026-11-24", "2026-11-25"]  # another table's write changes nothing
    if tables.name == "parquet":
        with pytest.raises(ConfigError, match="keeps no versions"):
            tables.partitions("t", as_of="0")
        return
    assert first is not None
    assert tables.partitions("t", as_of=first) == ["2026-11-25"]  # the next day came later
    assert tables.scan("t", tables.partitions("t", as_of=first), as_of=first).collect().to_dict(as_series=False) == {
        "a": [1]}
    with pytest.raises(ConfigError):
        tables.partitions("t", as_of="987654321")
