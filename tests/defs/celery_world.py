"""The world of the Celery tests (docs/scaling-out.md, "Dagster's Celery executor"): what a fleet shares and
the helpers that read what a run left.

Everything is real and on 127.0.0.1: Redis (Debian's ``redis-server``) is the broker, PostgreSQL holds the
Dagster instance and the result store, moto's S3 server holds the landing and the warehouse, the fake
OpenAI-compatible server is the provider, and each worker is ``celery -A faithfulness_pipeline.defs.celery_app
worker`` in a folder, TMPDIR, DAGSTER_HOME and (as root) host name of its own (``tests/defs/celery_fleet.py``).
The fixtures ``broker`` and ``world`` are in tests/defs/conftest.py.
"""

from __future__ import annotations

import io
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import polars as pl
import polars.selectors as cs
import psycopg
import pytest

from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.tables.storage import Place
from faithfulness_pipeline.testing.fakellm import FakeLLMServer, Latency
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.conftest import S3Bucket
from tests.defs.celery_fleet import Fleet
from tests.defs.pg_instance import postgres_home, set_up_instance
from tests.postgres_cluster import Cluster
from tests.redis_server import RedisServer, missing_reason, redis_server
from tests.reliability.support import (
    KEY_ENV,
    MODEL,
    STEPS,
    child_env,
    short_rows,
    step_items,
)

DAY = "2026-11-25"
KEY = "sk-celery-fleet-5d2a7c19e03b4f68"
SHARDS = 4
ROWS = 96
#: The scored day's tables, up to the scored one (the BI tables after it add run time, not coverage).
TABLES = ("raw_conversations", "extracted_claims", "judged_claims", "scored_conversations")
#: Columns that name a run, not a row's result.
RUN_COLUMNS = ("scored_at", "scoring_run_id")
#: Seconds a day may take here, start of the run to its end, on a loaded 2-core machine.
RUN_LIMIT_S = 240
#: Leases and the visibility timeout, short: a dead worker's step and items are taken over within the test,
#: yet leaving a healthy step room (seconds on a loaded machine, where a step's process starts slowly).
LEASE_S = 3.0
VISIBILITY_S = 30.0
#: The provider's limit on requests in flight, and what one judge step sends at once (FP_JUDGE_MAX_CONCURRENCY).
PROVIDER_LIMIT = 4
PER_STEP = 2
#: Seconds within which a run fails once its broker is gone (docs/scaling-out.md states it).
BROKER_LOSS_S = 60


def broker_fixture() -> Iterator[RedisServer]:
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    with redis_server() as server:
        yield server


@dataclass
class World:
    fleet: Fleet
    instance: dg.DagsterInstance
    bucket: S3Bucket
    server: FakeLLMServer
    judge: ScriptedJudge
    broker: RedisServer
    cluster: Cluster
    tag: str

    def warehouse(self, prefix: str) -> WarehouseResource:
        return WarehouseResource(root=self.bucket.uri(prefix))

    def store(self, name: str) -> str:
        database = f"{name}_{self.tag}"
        self.cluster.psql(f"CREATE DATABASE {database}")
        return self.cluster.url(database=database)


def world_fixture(postgres: Cluster, s3: S3Bucket, broker: RedisServer, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:  # fmt: skip
    tag = tmp_path.name.replace("-", "_").lower()
    postgres.psql(f"CREATE DATABASE dagster_{tag}")
    dagster_url = postgres.url(database=f"dagster_{tag}").replace("postgresql://", "postgresql+psycopg2://")
    rows = io.BytesIO()
    short_rows(ROWS, day=DAY).write_parquet(rows)
    Place.of(s3.uri("landing/day.parquet")).write_bytes(rows.getvalue())
    judge = ScriptedJudge()
    with FakeLLMServer(judge, latency=Latency(base_s=0.05)) as server:
        env = child_env(
            FP_DAGSTER_PG_URL=dagster_url, FP_LANDING=s3.uri("landing/"), FP_WAREHOUSE=s3.uri("celery"),
            FP_PARTITIONS_START=DAY, FP_JUDGE_MODEL=MODEL, FP_JUDGE_API_BASE=server.base_url,
            FP_JUDGE_API_KEY_ENV=KEY_ENV, FP_JUDGE_SHARDS=str(SHARDS), FP_JUDGE_MAX_CONCURRENCY=str(PER_STEP),
            FP_CELERY_BROKER=broker.url, FP_CELERY_BACKEND=broker.url.replace("/0", "/1"),
            **{KEY_ENV: KEY}, **s3.env,
        )  # fmt: skip
        operator = postgres_home(tmp_path / "operator" / "dagster_home")
        set_up_instance(operator, dagster_url, env)
        monkeypatch.setenv("FP_DAGSTER_PG_URL", dagster_url)
        fleet = Fleet(tmp_path, env, operator)
        try:
            with dg.DagsterInstance.from_config(str(operator)) as instance:
                yield World(fleet, instance, s3, server, judge, broker, postgres, tag)
        finally:
            fleet.close()


def finish(run: subprocess.Popen[str], limit: float = RUN_LIMIT_S) -> str:
    try:
        out, _ = run.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        run.kill()
        out, _ = run.communicate()
        raise AssertionError(f"the run did not end within {limit} s:\n{out[-4000:]}") from None
    assert run.returncode == 0, out[-4000:]
    return out


def tables(warehouse: WarehouseResource) -> dict[str, pl.DataFrame]:
    return {table: pl.read_parquet(io.BytesIO(warehouse.partition(table, DAY).read_bytes()))
            .drop(RUN_COLUMNS, strict=False) for table in TABLES}  # fmt: skip


def only_run(instance: dg.DagsterInstance) -> dg.DagsterRun:
    runs = instance.get_runs()
    assert len(runs) == 1, runs
    return runs[0]


def store_counts(store_url: str) -> dict[str, int]:
    with psycopg.connect(store_url) as conn:
        if conn.execute("SELECT to_regclass('fp_results')").fetchone() == (None,):
            return dict.fromkeys(STEPS, 0)  # no step has opened the store yet
        counts = {str(step): int(n) for step, n in conn.execute("SELECT step, count(*) FROM fp_results GROUP BY step")}
    return {step: counts.get(step, 0) for step in STEPS}


def leases_of(store_url: str, pids: set[int]) -> int:
    """Leases held by the processes ``pids`` (an owner is ``host:pid:tag``)."""
    with psycopg.connect(store_url) as conn:
        if conn.execute("SELECT to_regclass('fp_leases')").fetchone() == (None,):
            return 0  # no step has opened the store yet
        owners = [str(owner) for (owner,) in conn.execute("SELECT owner FROM fp_leases")]
    return sum(1 for owner in owners if int(owner.split(":")[1]) in pids)


def results(table: pl.DataFrame) -> pl.DataFrame:
    """A table's results without what says where each came from and what producing it was billed."""
    return table.drop("result_source", cs.starts_with("billed_"), strict=False)


def asked(judge: ScriptedJudge) -> dict[str, int]:
    return {step: step_items(judge, step) for step in STEPS}


