"""A day's assets materialised into Delta tables (warehouse.table_format = "delta"): read by deltalake, polars and
DuckDB (over Arrow), versions recorded in the metadata and read back, a failed write leaves the version alone."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import polars as pl
import pytest
from deltalake import DeltaTable
from polars.testing import assert_frame_equal

from faithfulness_pipeline.defs import DefsSettings, build_defs
from faithfulness_pipeline.defs.resources import LabelsResource, LandingResource, ScoringResource, WarehouseResource
from faithfulness_pipeline.report.data import scored_chunks
from tests.defs.conftest import SAMPLE, TABLES, Lake
from tests.doc_blocks import block

DAY = "2026-11-25"
#: The tables whose materialisation records the version it committed.
VERSIONED = ("raw_conversations", "extracted_claims", "judged_claims", "scored_conversations", "claim_table",
             "daily_answer_quality")


@pytest.fixture
def delta_lake(tmp_path: Path, dagster_home: Path) -> Lake:
    landing = tmp_path / "landing"
    shutil.copytree(SAMPLE, landing, ignore=shutil.ignore_patterns("*.py"))
    warehouse = tmp_path / "warehouse"
    settings = DefsSettings(landing=LandingResource(path=str(landing)),
                            warehouse=WarehouseResource(root=str(warehouse), table_format="delta"),
                            labels=LabelsResource())
    return Lake(landing, warehouse, build_defs(settings))


def _metadata(result: dg.ExecuteInProcessResult) -> dict[str, dict[str, Any]]:
    return {e.asset_key.to_user_string(): {k: v.value for k, v in e.materialization.metadata.items()}
            for e in result.get_asset_materialization_events() if e.asset_key}


def test_a_day_in_delta_tables_is_read_by_every_engine_and_each_version_is_what_it_published(
        delta_lake: Lake, tmp_path: Path) -> None:
    with dg.instance_for_test() as instance:
        first = delta_lake.materialize(DAY, instance)
        assert first.success
        published = _metadata(first)
        for table in VERSIONED:
            assert published[table]["table_format"] == "delta", table
            assert published[table]["table_version"] == "0", table
        scored_uri = str(delta_lake.warehouse / "scored_conversations")
        scored = DeltaTable(scored_uri).to_pyarrow_table()
        assert scored.num_rows == 9 and set(scored.column("ds").to_pylist()) == {DAY}
        # polars reads the tables by themselves, and DuckDB queries the Arrow data deltalake gives it
        by_polars = pl.scan_delta(scored_uri).filter(pl.col("ds") == DAY).collect()
        assert by_polars.height == 9
        claims = DeltaTable(str(delta_lake.warehouse / "claim_table")).to_pyarrow_table()
        con = duckdb.connect()
        con.register("claims", claims)
        con.register("scored", scored)
        joined = con.execute("SELECT count(*) FROM claims c JOIN scored s USING (row_key, ds)").fetchone()
        assert joined == (claims.num_rows,) and claims.num_rows > 0
        daily = pl.read_delta(str(delta_lake.warehouse / "daily_answer_quality"))
        assert daily.get_column("answers").sum() == 9

        # the same day scored again on another scale: a new version of each table, the first still readable
        again = delta_lake.materialize(DAY, instance, resources={"scoring": ScoringResource(scale=10)})
        assert again.success
        republished = _metadata(again)
    warehouse = WarehouseResource(root=str(delta_lake.warehouse), table_format="delta")
    for table in VERSIONED:
        assert int(republished[table]["table_version"]) > int(published[table]["table_version"]), table
    old = warehouse.scan("scored_conversations", [DAY], as_of=published["scored_conversations"]["table_version"])
    new = warehouse.scan("scored_conversations", [DAY], as_of=republished["scored_conversations"]["table_version"])
    old_scores = old.select("row_key", "hallucination_score").sort("row_key").collect()
    new_scores = new.select("row_key", "hallucination_score").sort("row_key").collect()
    assert_frame_equal(new_scores, old_scores.with_columns(pl.col("hallucination_score") * 10), check_dtypes=False)
    assert_frame_equal(warehouse.scan("scored_conversations", [DAY]).collect(), new.collect())
    # each version is what its materialisation published: its row count and its run
    for result, meta in ((first, published), (again, republished)):
        frame = warehouse.scan("scored_conversations", [DAY],
                               as_of=meta["scored_conversations"]["table_version"]).collect()
        assert frame.height == meta["scored_conversations"]["dagster/row_count"]
        assert set(frame.get_column("scoring_run_id")) == {result.run_id}
    for table in TABLES:
        assert warehouse.exists(table, DAY), table
    # the BI views and the report read the latest version's files only (the replaced version's are still there)
    assert len(list((delta_lake.warehouse / "scored_conversations").rglob("*.parquet"))) == 2
    bi = duckdb.connect(str(delta_lake.warehouse / "answer_quality.duckdb"), read_only=True,
                        config={"file_search_path": str(delta_lake.warehouse)})
    try:
        assert bi.execute("SELECT count(*), count(DISTINCT row_key), CAST(min(day) AS VARCHAR), "
                          "max(hallucination_score) > 1 FROM scored_conversations").fetchone() == (9, 9, DAY, True)
        assert bi.execute("SELECT sum(answers) FROM daily_answer_quality").fetchone() == (9,)
        assert bi.execute("SELECT count(*) FROM claim_table WHERE evidence IS NOT NULL").fetchone() != (0,)
    finally:
        bi.close()
    assert sum(chunk.height for chunk in scored_chunks(str(delta_lake.warehouse))) == 9
    # the page's recipe, as printed, reads the first materialisation back
    recipe: dict[str, Any] = {"root": str(delta_lake.warehouse), "day": DAY,
                              "table_version": published["scored_conversations"]["table_version"]}
    exec(block("docs/table-formats.md", "python", "DeltaTable(uri, version=int(table_version))"), recipe)
    assert_frame_equal(recipe["rows"].sort("row_key"), old.collect().sort("row_key"))
    assert recipe["published"].num_rows == recipe["same"].height == 9
    assert len(recipe["history"]) >= 2


def test_a_failed_write_leaves_the_table_version_as_it_was(delta_lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    with dg.instance_for_test() as instance:
        assert delta_lake.materialize(DAY, instance).success
        scored = DeltaTable(str(delta_lake.warehouse / "scored_conversations"))
        before = scored.version()

        from faithfulness_pipeline.tables.delta_tables import DeltaChunkSink

        def broken(self: DeltaChunkSink, frame: pl.DataFrame) -> None:
            raise OSError("disk full")

        monkeypatch.setattr(DeltaChunkSink, "write", broken)
        failed = delta_lake.materialize(DAY, instance, selection=dg.AssetSelection.assets("scored_conversations"))
    assert not failed.success
    scored.update_incremental()
    assert scored.version() == before
    assert DeltaTable(str(delta_lake.warehouse / "scored_conversations")).to_pyarrow_table().num_rows == 9


WORKER = """
import json, sys
from pathlib import Path
import dagster as dg
from faithfulness_pipeline.defs import DefsSettings, build_defs
from faithfulness_pipeline.defs.resources import LabelsResource, LandingResource, WarehouseResource
from tests.defs.conftest import Lake
landing, warehouse, day = sys.argv[1:4]
settings = DefsSettings(landing=LandingResource(path=landing),
                        warehouse=WarehouseResource(root=warehouse, table_format="delta"), labels=LabelsResource())
lake = Lake(Path(landing), Path(warehouse), build_defs(settings))
with dg.instance_for_test() as instance:
    result = lake.materialize(day, instance)
    print(json.dumps({"success": result.success, "versions": {
        e.asset_key.to_user_string(): e.materialization.metadata["table_version"].value
        for e in result.get_asset_materialization_events() if "table_version" in e.materialization.metadata}}))
"""


def test_two_workers_materialising_other_days_at_once_both_land(delta_lake: Lake) -> None:
    import json
    import subprocess
    import sys

    days = ("2026-11-24", "2026-11-26")
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, str(delta_lake.landing), str(delta_lake.warehouse), day],
                                cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for day in days]
    outputs = [w.communicate(timeout=300) for w in workers]
    assert [w.returncode for w in workers] == [0, 0], [err[-2000:] for _, err in outputs]
    reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert all(r["success"] for r in reports)
    warehouse = WarehouseResource(root=str(delta_lake.warehouse), table_format="delta")
    for table in VERSIONED:
        versions = [int(r["versions"][table]) for r in reports]
        assert sorted(versions) == [0, 1], table  # both commits landed, each its own version
        for day, version in zip(days, versions, strict=True):
            assert warehouse.scan(table, [day], as_of=str(version)).collect().height > 0, (table, day)
            assert warehouse.rows(table, day) > 0
