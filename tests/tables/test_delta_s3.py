"""The delta table format in an object store: the same table on the moto S3 server, a day written and read back,
and a past version read as of it; two writers of other days at once both land (delta-rs 1.x commits on S3 with
a conditional put, which the server honours)."""

from __future__ import annotations

import threading
from pathlib import Path

import polars as pl
from deltalake import DeltaTable
from polars.testing import assert_frame_equal

from faithfulness_pipeline.tables.delta_tables import DeltaTables, live_files, storage_options
from faithfulness_pipeline.tables.storage import Place
from tests.conftest import S3Bucket


def _frame(n: int, tag: str) -> pl.DataFrame:
    return pl.DataFrame({"row_key": [f"{tag}-{i}" for i in range(n)], "score": [i / 4 for i in range(n)]})


def test_a_day_on_s3_is_written_read_back_and_read_as_of_a_version(s3: S3Bucket) -> None:
    root = Place.of(s3.uri("warehouse"))
    tables = DeltaTables(root)
    with tables.writer("scored", "2026-11-24") as sink:
        sink.write(_frame(3, "a"))
        sink.write(_frame(2, "b"))
    with tables.writer("scored", "2026-11-24") as again:
        again.write(_frame(4, "c"))
    assert (sink.committed, again.committed) == ("0", "1")
    assert any(key.startswith("warehouse/scored/_delta_log/") for key in s3.objects())
    assert tables.rows("scored", "2026-11-24") == 4 and tables.exists("scored", "2026-11-24")
    assert_frame_equal(pl.concat(tables.batches("scored", "2026-11-24", 3)), _frame(4, "c"))
    assert_frame_equal(tables.scan("scored", ["2026-11-24"], as_of="0").collect(),
                       pl.concat([_frame(3, "a"), _frame(2, "b")]))
    # deltalake itself (and so polars and DuckDB over its Arrow data) opens it with the same options
    table = DeltaTable(s3.uri("warehouse/scored"), storage_options=storage_options(root))
    assert table.version() == 1 and table.to_pyarrow_table().num_rows == 4
    live = live_files(root.child("scored"))
    assert live is not None and len(live) == 1 and live[0].uri.startswith(s3.uri("warehouse/scored/ds=2026-11-24/"))


def test_two_writers_of_other_days_on_s3_both_land(s3: S3Bucket) -> None:
    tables = DeltaTables(Place.of(s3.uri("warehouse")))
    barrier = threading.Barrier(2)
    committed: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def write(day: str) -> None:
        try:
            barrier.wait()
            for round_ in range(2):
                with tables.writer("t", day) as sink:
                    sink.write(pl.DataFrame({"round": [round_] * 5}))
                committed.setdefault(day, []).append(str(sink.committed))
        except BaseException as exc:  # handed to the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(day,)) for day in ("2026-11-24", "2026-11-25")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    assert sorted(int(v) for vs in committed.values() for v in vs) == [0, 1, 2, 3]
    for day, versions in committed.items():
        assert tables.scan("t", [day], as_of=versions[0]).collect().get_column("round").to_list() == [0] * 5
        assert tables.scan("t", [day]).collect().get_column("round").to_list() == [1] * 5


def test_the_bi_views_of_a_delta_warehouse_on_s3_read_the_latest_version(s3: S3Bucket, tmp_path: Path) -> None:
    import duckdb

    from faithfulness_pipeline.defs.duckdb_views import build_database, store_filesystem

    root = Place.of(s3.uri("warehouse"))
    tables = DeltaTables(root)
    for tag in ("old", "new"):  # the replaced version's file stays in the bucket
        with tables.writer("scored_conversations", "2026-11-24") as sink:
            sink.write(_frame(3, tag))
    assert len([k for k in s3.objects() if k.endswith(".parquet")]) == 2
    target = tmp_path / "bi.duckdb"
    assert build_database(target, root) == {"scored_conversations": 3}
    con = duckdb.connect(str(target), read_only=True)
    try:
        con.register_filesystem(store_filesystem(root))
        rows = con.execute("SELECT row_key, CAST(day AS VARCHAR) FROM scored_conversations ORDER BY row_key").fetchall()
    finally:
        con.close()
    assert rows == [(f"new-{i}", "2026-11-24") for i in range(3)]
