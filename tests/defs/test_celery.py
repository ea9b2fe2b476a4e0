"""A day on Dagster's Celery executor across two workers (docs/scaling-out.md, "Dagster's Celery executor").

Everything is real and on 127.0.0.1: Redis (Debian's ``redis-server``) is the broker, PostgreSQL holds the
Dagster instance and the result store, moto's S3 server holds the landing and the warehouse, the fake
OpenAI-compatible server is the provider, and each worker is ``celery -A faithfulness_pipeline.defs.celery_app
worker`` in a folder, TMPDIR, DAGSTER_HOME and (as root) host name of its own (``tests/defs/celery_fleet.py``).
"""

from __future__ import annotations

import io
import subprocess
import time
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
from faithfulness_pipeline.testing.fakellm import FakeLLMServer, FaultPlan, Latency
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.conftest import S3Bucket
from tests.defs.celery_fleet import Fleet, step_workers
from tests.defs.pg_instance import POOL_LIMIT, postgres_home, set_up_instance
from tests.defs.pool_events import LLM_STEP, pool_use
from tests.postgres_cluster import Cluster
from tests.redis_server import RedisServer, missing_reason, redis_server
from tests.reliability.support import (
    KEY_ENV,
    MODEL,
    STEPS,
    child_env,
    process_tree,
    short_rows,
    step_items,
    wait_for,
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
#: Leases and the visibility timeout, short: a dead worker's step and items are taken over within the test.
LEASE_S = 3.0
VISIBILITY_S = 15.0
#: The provider's limit on requests in flight, and what one judge step sends at once (FP_JUDGE_MAX_CONCURRENCY).
PROVIDER_LIMIT = 4
PER_STEP = 2


@pytest.fixture
def broker() -> Iterator[RedisServer]:
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


@pytest.fixture
def world(postgres: Cluster, s3: S3Bucket, broker: RedisServer, tmp_path: Path,
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


def _finish(run: subprocess.Popen[str], limit: float = RUN_LIMIT_S) -> str:
    try:
        out, _ = run.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        run.kill()
        out, _ = run.communicate()
        raise AssertionError(f"the run did not end within {limit} s:\n{out[-4000:]}") from None
    assert run.returncode == 0, out[-4000:]
    return out


def _tables(warehouse: WarehouseResource) -> dict[str, pl.DataFrame]:
    return {table: pl.read_parquet(io.BytesIO(warehouse.partition(table, DAY).read_bytes()))
            .drop(RUN_COLUMNS, strict=False) for table in TABLES}  # fmt: skip


def _only_run(instance: dg.DagsterInstance) -> dg.DagsterRun:
    runs = instance.get_runs()
    assert len(runs) == 1, runs
    return runs[0]


@pytest.mark.timeout(600)
def test_a_day_in_four_shards_runs_on_both_workers_as_on_one_machine(world: World) -> None:
    fleet = world.fleet
    fleet.env["FP_JUDGE_STORE"] = world.store("results")
    for name in ("worker-a", "worker-b"):
        fleet.start_worker(name)
    fleet.wait_ready()
    out = _finish(fleet.launch(DAY))
    celery_billed = world.server.stats()
    run = _only_run(world.instance)
    assert run.status == dg.DagsterRunStatus.SUCCESS, out[-3000:]
    workers = step_workers(world.instance, run.run_id)
    shards = {step: names for step, names in workers.items() if step.startswith(LLM_STEP)}
    assert len(shards) == SHARDS and all(len(names) == 1 for names in shards.values()), shards
    assert {names[0].split("@")[0] for names in shards.values()} == {"worker-a", "worker-b"}, shards
    assert pool_use(world.instance, [run.run_id]).peak() <= 2
    celery = _tables(world.warehouse("celery"))
    # nothing the steps handed each other is on the launching machine's disk: it is in the bucket
    assert not list((fleet.operator / "storage").rglob(f"{run.run_id}/*judge_shard*"))
    assert any(key.startswith("celery/_dagster/") for key in world.bucket.objects())

    # the same day on one machine: the local multiprocess executor, a store of its own, the same server
    world.server.reset_stats()
    one = _finish(fleet.launch(DAY, FP_CELERY_BROKER="", FP_WAREHOUSE=world.bucket.uri("one"),
                               FP_JUDGE_STORE=world.store("one")))  # fmt: skip
    one_billed = world.server.stats()
    local_run = next(r for r in world.instance.get_runs() if r.run_id != run.run_id)
    assert local_run.status == dg.DagsterRunStatus.SUCCESS, one[-3000:]
    assert step_workers(world.instance, local_run.run_id) == {}  # no step of it went to a worker
    local = _tables(world.warehouse("one"))
    for table in TABLES:
        assert celery[table].equals(local[table]), table
    assert celery["raw_conversations"].height == ROWS
    assert (celery_billed.requests, celery_billed.billed_prompt_tokens, celery_billed.billed_completion_tokens) == (
        one_billed.requests, one_billed.billed_prompt_tokens, one_billed.billed_completion_tokens)
    assert celery_billed.by_outcome == {"ok": celery_billed.requests}


def _store_counts(store_url: str) -> dict[str, int]:
    with psycopg.connect(store_url) as conn:
        if conn.execute("SELECT to_regclass('fp_results')").fetchone() == (None,):
            return dict.fromkeys(STEPS, 0)  # no step has opened the store yet
        counts = {str(step): int(n) for step, n in conn.execute("SELECT step, count(*) FROM fp_results GROUP BY step")}
    return {step: counts.get(step, 0) for step in STEPS}


def _leases_of(store_url: str, pids: set[int]) -> int:
    """Leases held by the processes ``pids`` (an owner is ``host:pid:tag``)."""
    with psycopg.connect(store_url) as conn:
        if conn.execute("SELECT to_regclass('fp_leases')").fetchone() == (None,):
            return 0  # no step has opened the store yet
        owners = [str(owner) for (owner,) in conn.execute("SELECT owner FROM fp_leases")]
    return sum(1 for owner in owners if int(owner.split(":")[1]) in pids)


def _results(table: pl.DataFrame) -> pl.DataFrame:
    """A table's results without what says where each came from and what producing it was billed."""
    return table.drop("result_source", cs.starts_with("billed_"), strict=False)


def _asked(judge: ScriptedJudge) -> dict[str, int]:
    return {step: step_items(judge, step) for step in STEPS}


@pytest.mark.timeout(600)
def test_a_worker_killed_mid_shard_leaves_its_step_to_the_other_paying_only_what_the_store_lacks(
    world: World,
) -> None:
    """Worker A alone takes the day's first judge shard; SIGKILLed (its whole process group) while it asks
    the provider and holds leases. Worker B, started then, runs what was queued and, once the visibility
    timeout is over, the step A died in: the run succeeds, each item A had not stored is asked once more
    and no other, and the day equals the day of one machine."""
    fleet = world.fleet
    store = world.store("results")
    fleet.env.update(FP_JUDGE_STORE=store, FP_JUDGE_STORE_LEASE_S=str(LEASE_S),
                     FP_CELERY_VISIBILITY_TIMEOUT_S=str(VISIBILITY_S))  # fmt: skip
    world.server.set_latency(Latency(base_s=0.4))  # a shard asks for seconds: long enough to be caught in it
    a = fleet.start_worker("worker-a")
    fleet.wait_ready()
    run = fleet.launch(DAY)
    try:
        def a_mid_shard() -> bool:
            assert run.poll() is None, run.communicate()[0][-3000:]
            # mid-shard: A holds leases and has stored part of what it asked for
            leasing = _leases_of(store, set(process_tree(a.process.pid))) > 0
            return leasing and sum(_store_counts(store).values()) > 0

        wait_for(a_mid_shard, None, "worker A asking for a shard", RUN_LIMIT_S)
        a.kill()
        killed_at = time.monotonic()
        # the requests A left open have reached the server and ended there: what it asked is counted
        wait_for(lambda: world.server.stats().open_requests == 0, None, "A's open requests to end", 60)
        kept, before = _store_counts(store), _asked(world.judge)
        assert sum(kept.values()) > 0
        fleet.start_worker("worker-b")
        out = _finish(run)
    finally:
        if run.poll() is None:
            run.kill()
    recovered_s = time.monotonic() - killed_at
    faulted = _only_run(world.instance)
    assert faulted.status == dg.DagsterRunStatus.SUCCESS, out[-3000:]
    asked_again = {step: n - before[step] for step, n in _asked(world.judge).items()}
    workers = step_workers(world.instance, faulted.run_id)
    retaken = [step for step, names in workers.items() if [n.split("@")[0] for n in names] == ["worker-a", "worker-b"]]
    assert len(retaken) == 1 and retaken[0].startswith(LLM_STEP), workers  # the step A died in, run again by B
    assert all(len(names) == 1 for step, names in workers.items() if step not in retaken), workers

    # one machine, a store of its own: the same day, and what one clean run asks
    asked_before_one = _asked(world.judge)
    _finish(fleet.launch(DAY, FP_CELERY_BROKER="", FP_WAREHOUSE=world.bucket.uri("one"),
                         FP_JUDGE_STORE=world.store("one")))  # fmt: skip
    one = {step: n - asked_before_one[step] for step, n in _asked(world.judge).items()}
    print(f"killed with {kept} stored of {one}; the rest asked {asked_again}; recovered in {recovered_s:.0f} s")
    assert asked_again == {step: one[step] - kept[step] for step in STEPS}
    assert _store_counts(store) == one  # every item stored once
    celery, local = _tables(world.warehouse("celery")), _tables(world.warehouse("one"))
    # the same results; where they came from differs: what A stored before it died B took from the store
    judged = celery["judged_claims"]
    assert judged.filter(pl.col("result_source") == "store").height > 0
    for table in TABLES:
        assert _results(celery[table]).equals(_results(local[table])), table
    assert celery["scored_conversations"].get_column("conversation_id").n_unique() == ROWS



@pytest.mark.timeout(600)
def test_the_llm_judge_pool_holds_across_workers_so_the_fleet_stays_under_the_providers_limit(world: World) -> None:
    """dagster-celery 0.29.27's execution loop claims the ``llm_judge`` pool in the instance for each step it
    sends (it runs the plan under an InstanceConcurrencyContext, as the multiprocess executor does): with
    three idle workers and four shards, no more than the pool's 2 judge steps run at once, so 2 steps x 2
    requests each stay within a provider that refuses a fifth request in flight. No request is refused."""
    fleet = world.fleet
    fleet.env["FP_JUDGE_STORE"] = world.store("results")
    world.server.set_faults(FaultPlan(max_concurrent=PROVIDER_LIMIT))
    world.server.set_latency(Latency(base_s=0.15))  # requests overlap across steps
    for name in ("worker-a", "worker-b", "worker-c"):
        fleet.start_worker(name)
    fleet.wait_ready()
    out = _finish(fleet.launch(DAY))
    run = _only_run(world.instance)
    assert run.status == dg.DagsterRunStatus.SUCCESS, out[-3000:]
    stats = world.server.stats()
    assert "429" not in stats.by_outcome, stats.by_outcome
    assert stats.max_in_flight_seen <= POOL_LIMIT * PER_STEP <= PROVIDER_LIMIT
    use = pool_use(world.instance, [run.run_id])
    assert use.peak() == POOL_LIMIT  # the pool, not the number of idle workers, bounded the judge steps
    shards = {step: names for step, names in step_workers(world.instance, run.run_id).items()
              if step.startswith(LLM_STEP)}  # fmt: skip
    assert len(shards) == SHARDS and len({names[0] for names in shards.values()}) >= 2, shards
    scored = _tables(world.warehouse("celery"))["scored_conversations"]
    assert scored.height == ROWS and scored.get_column("status").eq("ok").all()


#: Seconds within which a run fails once its broker is gone (docs/scaling-out.md states it).
BROKER_LOSS_S = 60


@pytest.mark.timeout(600)
def test_a_run_that_loses_its_broker_fails_at_once_naming_it_and_the_day_relaunched_completes(world: World) -> None:
    """Redis SIGKILLed while the judge steps run: the run does not wait for results that cannot come; it
    fails within BROKER_LOSS_S, its output naming the refused connection. With the broker back (its
    append-only file kept what was queued, as a production broker's does), the day launched again completes,
    whole, each row scored once, what the first run stored taken from the store."""
    fleet = world.fleet
    store = world.store("results")
    fleet.env["FP_JUDGE_STORE"] = store
    world.server.set_latency(Latency(base_s=0.3))
    for name in ("worker-a", "worker-b"):
        fleet.start_worker(name)
    fleet.wait_ready()
    run = fleet.launch(DAY)
    try:
        wait_for(lambda: sum(_store_counts(store).values()) > 0, None, "a judge step to store results", RUN_LIMIT_S)
        world.broker.stop()
        lost_at = time.monotonic()
        out = _finish_failed(run, BROKER_LOSS_S)
    finally:
        if run.poll() is None:
            run.kill()
    failed_after = time.monotonic() - lost_at
    assert _only_run(world.instance).status == dg.DagsterRunStatus.FAILURE
    assert "Connection refused" in out or "ConnectionError" in out, out[-3000:]
    world.broker.start()
    # The dead run's judge steps never ended, so their `llm_judge` slots stay claimed: a relaunch would wait
    # for them. The daemon's run monitoring frees them (free_slots_after_run_end_seconds in
    # dagster_home/postgres/dagster.yaml, 60 s after the run ended); here the same storage call, at once.
    failed = _only_run(world.instance).run_id
    storage = world.instance.event_log_storage
    assert failed in storage.get_concurrency_run_ids()
    storage.free_concurrency_slots_for_run(failed)
    assert failed not in storage.get_concurrency_run_ids()
    stored = sum(_store_counts(store).values())
    again = _finish(fleet.launch(DAY))
    latest = world.instance.get_runs(limit=1)[0]  # newest first
    assert latest.status == dg.DagsterRunStatus.SUCCESS, again[-3000:]
    scored = _tables(world.warehouse("celery"))["scored_conversations"]
    assert scored.height == ROWS and scored.get_column("row_key").n_unique() == ROWS
    assert scored.get_column("status").eq("ok").all()
    judged = _tables(world.warehouse("celery"))["judged_claims"]
    assert judged.filter(pl.col("result_source") == "store").height > 0 and stored > 0
    print(f"the run failed {failed_after:.1f} s after the broker went down; the relaunch completed the day")


def _finish_failed(run: subprocess.Popen[str], limit: float) -> str:
    try:
        out, _ = run.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        run.kill()
        raise AssertionError(f"the run still waited {limit} s after its broker was gone:\n"
                             f"{run.communicate()[0][-4000:]}") from None
    assert run.returncode != 0, out[-3000:]
    return out
