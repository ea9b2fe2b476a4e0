"""A day on Dagster's Celery executor across workers, within the provider's limit (docs/scaling-out.md,
"Dagster's Celery executor"; the world: tests/defs/celery_world.py)."""

from __future__ import annotations

import dagster as dg
import pytest

from faithfulness_pipeline.testing.fakellm import FaultPlan, Latency
from tests.defs.celery_fleet import step_workers
from tests.defs.celery_world import (
    DAY,
    PER_STEP,
    PROVIDER_LIMIT,
    ROWS,
    SHARDS,
    TABLES,
    World,
    finish,
    only_run,
    tables,
)
from tests.defs.pg_instance import POOL_LIMIT
from tests.defs.pool_events import LLM_STEP, pool_use


@pytest.mark.timeout(600)
def test_a_day_in_four_shards_runs_on_both_workers_as_on_one_machine(world: World) -> None:
    fleet = world.fleet
    fleet.env["FP_JUDGE_STORE"] = world.store("results")
    for name in ("worker-a", "worker-b"):
        fleet.start_worker(name)
    fleet.wait_ready()
    out = finish(fleet.launch(DAY))
    celery_billed = world.server.stats()
    run = only_run(world.instance)
    assert run.status == dg.DagsterRunStatus.SUCCESS, out[-3000:]
    workers = step_workers(world.instance, run.run_id)
    shards = {step: names for step, names in workers.items() if step.startswith(LLM_STEP)}
    assert len(shards) == SHARDS and all(len(names) == 1 for names in shards.values()), shards
    assert {names[0].split("@")[0] for names in shards.values()} == {"worker-a", "worker-b"}, shards
    assert pool_use(world.instance, [run.run_id]).peak() <= 2
    celery = tables(world.warehouse("celery"))
    # nothing the steps handed each other is on the launching machine's disk: it is in the bucket
    assert not list((fleet.operator / "storage").rglob(f"{run.run_id}/*judge_shard*"))
    assert any(key.startswith("celery/_dagster/") for key in world.bucket.objects())

    # the same day on one machine: the local multiprocess executor, a store of its own, the same server
    world.server.reset_stats()
    one = finish(fleet.launch(DAY, FP_CELERY_BROKER="", FP_WAREHOUSE=world.bucket.uri("one"),
                               FP_JUDGE_STORE=world.store("one")))  # fmt: skip
    one_billed = world.server.stats()
    local_run = next(r for r in world.instance.get_runs() if r.run_id != run.run_id)
    assert local_run.status == dg.DagsterRunStatus.SUCCESS, one[-3000:]
    assert step_workers(world.instance, local_run.run_id) == {}  # no step of it went to a worker
    local = tables(world.warehouse("one"))
    for table in TABLES:
        assert celery[table].equals(local[table]), table
    assert celery["raw_conversations"].height == ROWS
    assert (celery_billed.requests, celery_billed.billed_prompt_tokens, celery_billed.billed_completion_tokens) == (
        one_billed.requests, one_billed.billed_prompt_tokens, one_billed.billed_completion_tokens)
    assert celery_billed.by_outcome == {"ok": celery_billed.requests}


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
    out = finish(fleet.launch(DAY))
    run = only_run(world.instance)
    assert run.status == dg.DagsterRunStatus.SUCCESS, out[-3000:]
    stats = world.server.stats()
    assert "429" not in stats.by_outcome, stats.by_outcome
    assert stats.max_in_flight_seen <= POOL_LIMIT * PER_STEP <= PROVIDER_LIMIT
    use = pool_use(world.instance, [run.run_id])
    assert use.peak() == POOL_LIMIT  # the pool, not the number of idle workers, bounded the judge steps
    shards = {step: names for step, names in step_workers(world.instance, run.run_id).items()
              if step.startswith(LLM_STEP)}  # fmt: skip
    assert len(shards) == SHARDS and len({names[0] for names in shards.values()}) >= 2, shards
    scored = tables(world.warehouse("celery"))["scored_conversations"]
    assert scored.height == ROWS and scored.get_column("status").eq("ok").all()
