"""Faults of a Celery fleet: a worker SIGKILLed mid-shard, the broker lost mid-day (docs/scaling-out.md,
"Dagster's Celery executor"; the world: tests/defs/celery_world.py). Apart from tests/defs/test_celery.py so
that the two files' runs, which mostly wait, share the machine's two test workers."""

from __future__ import annotations

import subprocess
import time

import dagster as dg
import polars as pl
import pytest

from faithfulness_pipeline.testing.fakellm import Latency
from tests.defs.celery_fleet import step_workers
from tests.defs.celery_world import (
    BROKER_LOSS_S,
    DAY,
    LEASE_S,
    ROWS,
    RUN_LIMIT_S,
    STEPS,
    TABLES,
    VISIBILITY_S,
    World,
    asked,
    finish,
    leases_of,
    only_run,
    results,
    store_counts,
    tables,
)
from tests.defs.pool_events import LLM_STEP
from tests.reliability.support import process_tree, wait_for


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
            leasing = leases_of(store, set(process_tree(a.process.pid))) > 0
            return leasing and sum(store_counts(store).values()) > 0

        wait_for(a_mid_shard, None, "worker A asking for a shard", RUN_LIMIT_S)
        a.kill()
        killed_at = time.monotonic()
        # the requests A left open have reached the server and ended there: what it asked is counted
        wait_for(lambda: world.server.stats().open_requests == 0, None, "A's open requests to end", 60)
        kept, before = store_counts(store), asked(world.judge)
        assert sum(kept.values()) > 0
        # The slow provider was there to catch A mid-shard. B's steps must stay well inside the visibility
        # timeout, or Redis hands a step B is still running to a worker again (docs/scaling-out.md: set it
        # above the longest step): on a loaded machine, 0.4 s a request made a shard outlast it.
        world.server.set_latency(Latency())
        fleet.start_worker("worker-b")
        out = finish(run)
    finally:
        if run.poll() is None:
            run.kill()
    recovered_s = time.monotonic() - killed_at
    faulted = only_run(world.instance)
    assert faulted.status == dg.DagsterRunStatus.SUCCESS, out[-3000:]
    asked_again = {step: n - before[step] for step, n in asked(world.judge).items()}
    workers = step_workers(world.instance, faulted.run_id)
    retaken = [step for step, names in workers.items() if [n.split("@")[0] for n in names] == ["worker-a", "worker-b"]]
    assert len(retaken) == 1 and retaken[0].startswith(LLM_STEP), workers  # the step A died in, run again by B
    assert all(len(names) == 1 for step, names in workers.items() if step not in retaken), workers

    # one machine, a store of its own: the same day, and what one clean run asks
    asked_before_one = asked(world.judge)
    finish(fleet.launch(DAY, FP_CELERY_BROKER="", FP_WAREHOUSE=world.bucket.uri("one"),
                         FP_JUDGE_STORE=world.store("one")))  # fmt: skip
    one = {step: n - asked_before_one[step] for step, n in asked(world.judge).items()}
    print(f"killed with {kept} stored of {one}; the rest asked {asked_again}; recovered in {recovered_s:.0f} s")
    assert asked_again == {step: one[step] - kept[step] for step in STEPS}
    assert store_counts(store) == one  # every item stored once
    celery, local = tables(world.warehouse("celery")), tables(world.warehouse("one"))
    # the same results; where they came from differs: what A stored before it died B took from the store
    judged = celery["judged_claims"]
    assert judged.filter(pl.col("result_source") == "store").height > 0
    for table in TABLES:
        assert results(celery[table]).equals(results(local[table])), table
    assert celery["scored_conversations"].get_column("conversation_id").n_unique() == ROWS



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
        wait_for(lambda: sum(store_counts(store).values()) > 0, None, "a judge step to store results", RUN_LIMIT_S)
        world.broker.stop()
        lost_at = time.monotonic()
        out = _finish_failed(run, BROKER_LOSS_S)
    finally:
        if run.poll() is None:
            run.kill()
    failed_after = time.monotonic() - lost_at
    assert only_run(world.instance).status == dg.DagsterRunStatus.FAILURE
    assert "Connection refused" in out or "ConnectionError" in out, out[-3000:]
    world.broker.start()
    # The dead run's judge steps never ended, so their `llm_judge` slots stay claimed: a relaunch would wait
    # for them. The daemon's run monitoring frees them (free_slots_after_run_end_seconds in
    # dagster_home/postgres/dagster.yaml, 60 s after the run ended); here the same storage call, at once.
    failed = only_run(world.instance).run_id
    storage = world.instance.event_log_storage
    assert failed in storage.get_concurrency_run_ids()
    storage.free_concurrency_slots_for_run(failed)
    assert failed not in storage.get_concurrency_run_ids()
    stored = sum(store_counts(store).values())
    again = finish(fleet.launch(DAY))
    latest = world.instance.get_runs(limit=1)[0]  # newest first
    assert latest.status == dg.DagsterRunStatus.SUCCESS, again[-3000:]
    scored = tables(world.warehouse("celery"))["scored_conversations"]
    assert scored.height == ROWS and scored.get_column("row_key").n_unique() == ROWS
    assert scored.get_column("status").eq("ok").all()
    judged = tables(world.warehouse("celery"))["judged_claims"]
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
