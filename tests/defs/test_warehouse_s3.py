"""The Dagster day with its landing and warehouse in S3 (moto's server on 127.0.0.1, real HTTP): the same
tables as on a local disk, the DuckDB views and the report over them; a run SIGKILLed while it writes the
day leaves the day as it was, whole and readable; a re-run replaces it."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import dagster as dg
import polars as pl
import pyarrow.parquet as pq
import pytest

from faithfulness_pipeline.defs import DefsSettings, build_defs
from faithfulness_pipeline.defs.resources import LandingResource
from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.tables.storage import Place
from tests.conftest import S3Bucket
from tests.defs.conftest import DAYS, SAMPLE, TABLES, make_lake
from tests.reliability.support import REPO, child_env, dg_launch, kill_group, make_home, wait_for

DAY = DAYS[1]


def _upload(folder: Path, bucket: S3Bucket, prefix: str) -> str:
    for path in sorted(folder.rglob("*.parquet")):
        Place.of(bucket.uri(f"{prefix}/{path.relative_to(folder)}")).write_bytes(path.read_bytes())
    return bucket.uri(prefix)


def _read(place: Place) -> pl.DataFrame:
    return pl.read_parquet(io.BytesIO(place.read_bytes()))


def test_a_day_in_s3_gives_the_tables_of_a_local_day(
    s3: S3Bucket, landing: Path, tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    local = make_lake(landing, tmp_path / "warehouse")
    assert local.materialize(DAY, instance).success
    settings = DefsSettings(
        landing=LandingResource(path=_upload(landing, s3, "landing")),
        warehouse=WarehouseResource(root=s3.uri("wh")),
    )
    defs = build_defs(settings)
    run = dg.materialize([*(defs.assets or []), *(defs.asset_checks or [])], partition_key=DAY, instance=instance,
                         resources=defs.resources, selection=dg.AssetSelection.groups("answer_quality"))  # type: ignore[arg-type]
    assert run.success
    assert all(e.passed for e in run.get_asset_check_evaluations() if e.check_name != "llm_judge_used")
    warehouse = settings.warehouse
    for table in TABLES:
        got = _read(warehouse.partition(table, DAY)).drop("scored_at", "scoring_run_id", strict=False)
        assert got.equals(local.read(table, DAY).drop("scored_at", "scoring_run_id", strict=False)), table
    objects = s3.objects()
    assert "wh/answer_quality.duckdb" in objects and "wh/answer_quality_report.html" in objects
    assert not [k for k in objects if "_staging" in k or k.endswith(".tmp")], objects  # nothing left behind


def test_a_run_killed_while_writing_its_day_leaves_the_day_whole(s3: S3Bucket, tmp_path: Path) -> None:
    """The day is written once; a second run is SIGKILLed while its scored table is being written (a staging
    object of the day is there); every table of the day is still the first run's, whole; a third run
    replaces them."""
    big = tmp_path / "landing"
    big.mkdir()
    rows = pl.read_parquet(sorted(SAMPLE.rglob("*.parquet"))[0]).filter(pl.col("created_at").dt.date().cast(pl.String) == DAY)
    # Many rows of one day, so the day's writes take long enough to be caught in the middle.
    many = pl.concat([rows.with_columns((pl.col("conversation_id") + f"-{k}").alias("conversation_id"))
                      for k in range(4000)])
    many.write_parquet(big / "day.parquet", row_group_size=5000)
    home = make_home(tmp_path / "home")
    env = child_env(DAGSTER_HOME=str(home), FP_LANDING=_upload(big, s3, "landing"), FP_WAREHOUSE=s3.uri("wh"),
                    FP_PARTITIONS_START=DAYS[0], FP_SCALE="1", **s3.env)
    first = subprocess.run(dg_launch(DAY), cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert first.returncode == 0, first.stderr[-3000:]
    warehouse = WarehouseResource(root=s3.uri("wh"))
    before = {table: warehouse.partition(table, DAY).read_bytes() for table in TABLES}

    env["FP_SCALE"] = "10"  # the second run writes other scores: a mixed day would show
    second = subprocess.Popen(dg_launch(DAY), cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        staged = f"wh/scored_conversations/ds={DAY}/."
        wait_for(lambda: any(k.startswith(staged) for k in s3.objects()) or bool(s3.server.open_uploads(s3.name)),
                 second, "the second run to be writing its scored table", 300)
    finally:
        kill_group(second)
    for table in TABLES:
        assert warehouse.partition(table, DAY).read_bytes() == before[table], table
        pq.ParquetFile(io.BytesIO(before[table])).read()  # whole: its footer and every row group read
    assert _read(warehouse.partition("scored_conversations", DAY)).get_column("hallucination_score").max() <= 1

    third = subprocess.run(dg_launch(DAY), cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert third.returncode == 0, third.stderr[-3000:]
    scored = _read(warehouse.partition("scored_conversations", DAY))
    assert scored.height == many.height and scored.get_column("hallucination_score").max() > 1
    assert s3.env["AWS_SECRET_ACCESS_KEY"] not in third.stdout + third.stderr  # credentials are never printed


def test_an_llm_judge_beside_a_warehouse_in_a_bucket_asks_for_a_store_of_its_own() -> None:
    from faithfulness_pipeline.core.errors import ConfigError
    from faithfulness_pipeline.defs.resources import JudgeResource

    llm = JudgeResource(model="openai/gpt-4o-mini", api_key="sk-bucket-store-1234567890")
    with pytest.raises(ConfigError, match="FP_JUDGE_STORE"):
        llm.settings(None, remote_warehouse=True)
    assert llm.settings("/w/_judge_store.sqlite").store == "/w/_judge_store.sqlite"  # a local warehouse's file
    assert llm.model_copy(update={"store": "postgresql://h/db"}).settings(None, remote_warehouse=True).store
    assert JudgeResource().settings(None, remote_warehouse=True).store is None  # the offline judge needs none
