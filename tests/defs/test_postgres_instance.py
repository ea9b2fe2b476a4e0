"""The documented PostgreSQL Dagster instance (dagster_home/postgres/dagster.yaml) on a real server: a day
is materialised with the judge's result store in the same server; the run, its events and the pool limit
live in PostgreSQL, and a re-run of the day is served from the PostgreSQL result store."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest

from faithfulness_pipeline.defs import DefsSettings, build_defs
from tests.defs.conftest import SAMPLE
from tests.fakellm import FakeLLMServer
from tests.fakellm.scripted import ScriptedJudge
from tests.postgres_cluster import Cluster

REPO = Path(__file__).resolve().parents[2]
KEY_ENV = "FP_TEST_PG_INSTANCE_KEY"
DAY = "2026-11-25"


@pytest.fixture(scope="module")
def cluster(postgres: Cluster) -> Cluster:
    postgres.psql("CREATE DATABASE dagster")
    postgres.psql("CREATE DATABASE results")
    return postgres


def test_a_day_runs_on_the_postgresql_instance_with_the_store_beside_it(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "postgres" / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("FP_DAGSTER_PG_URL", cluster.url(database="dagster").replace("postgresql://",
                                                                                     "postgresql+psycopg2://"))
    monkeypatch.setenv(KEY_ENV, "sk-pg-instance")
    with dg.DagsterInstance.from_config(str(home)) as instance, FakeLLMServer(ScriptedJudge()) as server:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        settings = DefsSettings.from_env({
            "FP_JUDGE_MODEL": "openai/fake-judge", "FP_JUDGE_API_BASE": server.base_url,
            "FP_JUDGE_API_KEY_ENV": KEY_ENV, "FP_JUDGE_STORE": cluster.url(database="results"),
            "FP_LANDING": str(SAMPLE), "FP_WAREHOUSE": str(tmp_path / "warehouse"),
        })
        defs = build_defs(settings)
        everything = [*(defs.assets or []), *(defs.asset_checks or [])]
        day_graph = dg.AssetSelection.groups("answer_quality")
        first = dg.materialize(everything, partition_key=DAY, instance=instance, resources=defs.resources,  # type: ignore[arg-type]
                               selection=day_graph)
        assert first.success
        sent = server.stats().requests
        assert sent > 0
        again = dg.materialize(everything, partition_key=DAY, instance=instance, resources=defs.resources,  # type: ignore[arg-type]
                               selection=day_graph)
        assert again.success and server.stats().requests == sent  # the re-run is served from the store
        limit = instance.get_concurrency_config().pool_config.default_pool_limit
    assert limit == 2
    assert int(cluster.psql("SELECT count(*) FROM runs", database="dagster").strip()) == 2
    assert int(cluster.psql("SELECT count(*) FROM fp_results", database="results").strip()) > 0
