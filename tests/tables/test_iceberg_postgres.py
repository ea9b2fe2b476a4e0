"""The iceberg format with its SQL catalog in PostgreSQL (the tests' throwaway cluster, over its Unix socket):
two processes commit days at once through it; a day reads back as of its snapshot; the catalog's password is in
no message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.defs.warehouse import WarehouseResource
from tests.postgres_cluster import PASSWORD, Cluster

REPO = Path(__file__).resolve().parents[2]

_WRITER = """
import sys
import polars as pl
from faithfulness_pipeline.defs.warehouse import WarehouseResource
warehouse = WarehouseResource(root=sys.argv[1], table_format="iceberg", iceberg_catalog=sys.argv[2])
for day in sys.argv[3:]:
    with warehouse.writer("scored", day) as sink:
        sink.write(pl.DataFrame({"row_key": [day] * 2, "n": [1, 2]}))
"""


def test_a_postgresql_catalog_takes_two_writers_at_once(postgres: Cluster, tmp_path: Path) -> None:
    postgres.psql("CREATE DATABASE iceberg_catalog")
    url = postgres.url(database="iceberg_catalog")
    days = [[f"2026-11-{d:02d}" for d in range(first, first + 3)] for first in (1, 11)]
    workers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path / "wh"), url, *ds], cwd=REPO,
                                stderr=subprocess.PIPE, text=True) for ds in days]
    for worker in workers:
        _, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err[-2000:]
    warehouse = WarehouseResource(root=str(tmp_path / "wh"), table_format="iceberg", iceberg_catalog=url)
    for day in days[0] + days[1]:
        assert warehouse.scan("scored", [day]).collect().get_column("row_key").to_list() == [day, day]
    first = warehouse.write_committed("scored", "2026-11-01", pl.DataFrame({"row_key": ["new"], "n": [9]}))[1]
    assert warehouse.rows("scored", "2026-11-01") == 1 and first is not None
    assert warehouse.read("scored", ["2026-11-02"]).height == 2
    tables = postgres.psql("SELECT table_name FROM iceberg_tables WHERE catalog_name = 'faithfulness'",
                           database="iceberg_catalog")
    assert tables.split() == ["scored"]  # the catalog's own table, as a JDBC catalog of Spark or Trino reads it
    wrong = WarehouseResource(root=str(tmp_path / "wh"), table_format="iceberg",
                              iceberg_catalog=postgres.url(database="no_such_database"))
    with pytest.raises(ConfigError, match=r"^FP_ICEBERG_CATALOG / warehouse.iceberg_catalog postgresql\+psycopg://\*\*\*@")\
            as err:
        wrong.rows("scored", "2026-11-01")
    assert PASSWORD not in str(err.value) and "\n" not in str(err.value)
