"""The BI database of a warehouse in an object store (moto's S3 server on 127.0.0.1): views over absolute
s3:// URIs, built and queried here without httpfs (through the registered pyarrow filesystem), answering
what the views of the same warehouse on a local disk answer."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.defs.duckdb_views import BI_TABLES, build_database, store_filesystem
from faithfulness_pipeline.settings.landing import WarehouseSettings
from faithfulness_pipeline.tables.storage import Place
from tests.conftest import S3Bucket
from tests.warehouse_files import upload, write_warehouse

QUERIES = (
    "SELECT CAST(day AS VARCHAR), count(*) FROM scored_conversations GROUP BY day ORDER BY day",
    "SELECT CAST(day AS VARCHAR), model, answers, hallucination_mean FROM daily_answer_quality ORDER BY day, model",
    "SELECT CAST(day AS VARCHAR), conversation_id, claim, verdict FROM claim_table ORDER BY day, conversation_id, claim",
)


def _answers(con: duckdb.DuckDBPyConnection) -> list[list[tuple[object, ...]]]:
    return [con.execute(query).fetchall() for query in QUERIES]


def test_views_of_an_s3_warehouse_read_absolute_uris_and_answer_like_a_local_one(tmp_path: Path, s3: S3Bucket) -> None:
    local = tmp_path / "wh"
    files = write_warehouse(local)
    upload(local, files, s3.uri("wh"))
    local_rows = build_database(local / "answer_quality.duckdb", local)
    # FP_DUCKDB unset: the file goes beside the tables, uploaded whole
    settings = WarehouseSettings(root=s3.uri("wh"))
    remote_rows = build_database(settings.duckdb_place(), settings.root_place())
    written = set(BI_TABLES) - {"raw_conversations"}  # the test's warehouse has no raw table: it gets no view
    assert remote_rows == local_rows and set(remote_rows) == written and all(remote_rows.values())
    assert s3.objects() == sorted([f"wh/{p.relative_to(local).as_posix()}" for p in files] + ["wh/answer_quality.duckdb"])

    downloaded = tmp_path / "from-s3.duckdb"
    settings.duckdb_place().get_file(downloaded)
    con = duckdb.connect(str(downloaded), read_only=True)
    try:
        sql = dict(con.execute("SELECT view_name, sql FROM duckdb_views() WHERE NOT internal").fetchall())
        assert all(f"s3://{s3.name}/wh/{view}/ds=*/data.parquet" in text for view, text in sql.items()), sql
        con.register_filesystem(store_filesystem(settings.root_place()))  # a BI tool's httpfs does this part
        there = _answers(con)
    finally:
        con.close()
    here_con = duckdb.connect(str(local / "answer_quality.duckdb"), read_only=True,
                              config={"file_search_path": str(local)})
    try:
        here = _answers(here_con)
    finally:
        here_con.close()
    assert there == here and all(there)


def test_a_local_duckdb_file_may_hold_the_views_of_an_s3_warehouse(tmp_path: Path, s3: S3Bucket) -> None:
    local = tmp_path / "wh"
    upload(local, write_warehouse(local), s3.uri("wh"))
    target = tmp_path / "bi" / "answer_quality.duckdb"
    settings = WarehouseSettings(root=s3.uri("wh"), duckdb_path=str(target))
    rows = build_database(settings.duckdb_file(), settings.root_place())
    assert rows["scored_conversations"] == 17
    con = duckdb.connect(str(target), read_only=True)
    try:
        con.register_filesystem(store_filesystem(Place.of(s3.uri("wh"))))
        assert con.execute("SELECT count(*) FROM claim_table").fetchone() == (rows["claim_table"],)
    finally:
        con.close()
    assert "wh/answer_quality.duckdb" not in s3.objects()


def test_an_s3_warehouse_has_no_local_root_path_and_says_which_place_to_use(s3: S3Bucket) -> None:
    settings = WarehouseSettings(root=s3.uri("wh/"))
    assert settings.root_place().uri == s3.uri("wh")
    assert settings.report_place().uri == s3.uri("wh/answer_quality_report.html")
    with pytest.raises(ConfigError, match=r"FP_WAREHOUSE .* object store.*root_place"):
        settings.root_path()
    with pytest.raises(ConfigError, match="duckdb_place"):
        settings.duckdb_file()


def test_a_warehouse_without_tables_gives_a_database_without_views(s3: S3Bucket, tmp_path: Path) -> None:
    target = tmp_path / "empty.duckdb"
    assert build_database(target, s3.uri("wh")) == {}
    con = duckdb.connect(str(target), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM duckdb_views() WHERE NOT internal").fetchone() == (0,)
    finally:
        con.close()
