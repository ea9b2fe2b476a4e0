"""The documented PostgreSQL Dagster instance (dagster_home/postgres/dagster.yaml) on a real server: a day
is materialised with the judge's result store in the same server; the run, its events and the pool limit
live in PostgreSQL, and a re-run of the day is served from the PostgreSQL result store."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext

from faithfulness_pipeline.defs import DefsSettings, build_defs
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.defs.conftest import SAMPLE
from tests.defs.pg_instance import POOL_LIMIT, postgres_home, set_up_instance
from tests.defs.pool_events import POOL
from tests.postgres_cluster import Cluster

KEY_ENV = "FP_TEST_PG_INSTANCE_KEY"
DAY = "2026-11-25"


@pytest.fixture(scope="module")
def cluster(postgres: Cluster) -> Cluster:
    for db in ("dagster", "results", "fresh"):
        postgres.psql(f"CREATE DATABASE {db}")
    return postgres


def test_a_day_runs_on_the_postgresql_instance_with_the_store_beside_it(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = postgres_home(tmp_path / "home")
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


def test_two_machines_reaching_the_pool_at_once_on_a_new_instance_both_get_a_slot(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recipe's setup keeps Dagster from initialising the pool when steps first reach it: without it,
    two steps of two machines claiming at the same moment on a new instance fail one of them with
    ``InFailedSqlTransaction`` (dagster#33552; every try of this test without the setup did)."""
    url = cluster.url(database="fresh").replace("postgresql://", "postgresql+psycopg2://")
    home = postgres_home(tmp_path / "home")
    set_up_instance(home, url)
    monkeypatch.setenv("FP_DAGSTER_PG_URL", url)
    machines = [dg.DagsterInstance.from_config(str(home)) for _ in range(POOL_LIMIT)]  # an engine each
    start = threading.Barrier(len(machines))
    claimed: list[bool] = []
    failures: list[Exception] = []

    def step(instance: dg.DagsterInstance) -> None:
        # the claim a step worker makes before an LLM step starts, as Dagster's executor makes it
        run = dg.DagsterRun(job_name="answer_quality", run_id=str(uuid.uuid4()))
        with InstanceConcurrencyContext(instance, run) as slots:
            start.wait()
            try:
                claimed.append(slots.claim(POOL, "claims_and_verdicts"))
            except Exception as exc:  # reported below, with the other thread's
                failures.append(exc)
            slots.free_step("claims_and_verdicts")

    threads = [threading.Thread(target=step, args=(instance,)) for instance in machines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for instance in machines:
        instance.dispose()
    assert failures == [] and claimed == [True] * POOL_LIMIT, failures
    limits = {pool.name: pool for pool in machines[0].event_log_storage.get_pool_limits()}
    assert limits[POOL].limit == POOL_LIMIT and not limits[POOL].from_default
