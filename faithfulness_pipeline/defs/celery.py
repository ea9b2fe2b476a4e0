"""Dagster's Celery executor (dagster-celery) built from the ``FP_CELERY_*`` settings, the Celery app its
workers run (``defs.celery_app``), and the IO manager of what steps hand each other, in the warehouse.

Both sides come from the same settings, so a worker listens on the broker and queues the code location
sends to, with the same delivery rules:

- a task is acknowledged when its step has ended (``task_acks_late``), not when a worker takes it: a worker
  that dies mid-step (SIGKILL, OOM, a lost machine) leaves its task in the broker, and another worker runs
  the step again ``visibility_timeout_s`` later (a step process killed under a live worker goes back at
  once: ``task_reject_on_worker_lost``). The result store's leases make the second run pay only for what
  the first did not store;
- a worker takes one task at a time (prefetch 1), so queued steps go to whichever worker is free;
- the LLM judge's steps go to ``judge_queue``: the workers listening there, and their concurrency, bound
  how many steps judge at once across the fleet (besides the ``llm_judge`` pool, which the pinned
  dagster-celery honours too: its execution loop claims pool slots like the multiprocess executor).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Mapping, Sequence
from typing import Any, Final

import dagster as dg
from celery import Celery
from dagster_celery import celery_executor
from dagster_celery.executor import CeleryExecutor
from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_task

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.settings.celery import CelerySettings
from faithfulness_pipeline.settings.derive import from_env
from faithfulness_pipeline.settings.sensitive import holds_password
from faithfulness_pipeline.tables.storage import Place

#: The tag by which dagster-celery sends a step to a queue (dagster_celery.tags.DAGSTER_CELERY_QUEUE_TAG).
QUEUE_TAG: Final = "dagster-celery/queue"
#: The queue of every step without that tag (dagster-celery's default).
DEFAULT_QUEUE: Final = "dagster"
#: Seconds between a worker's sweeps for tasks of dead workers, at most (kombu's default is ~100 s).
_SWEEP_MAX_S: Final = 10.0


def _source(value: str, variable: str) -> str | dict[str, str]:
    """A URL as the executor's config takes it: one with a password as the name of its variable, which
    each process reads itself, so run storage never holds the password."""
    if holds_password(value) and os.environ.get(variable, "").strip() == value:
        return {"env": variable}
    return value


def delivery(settings: CelerySettings) -> dict[str, Any]:
    """The Celery settings of both sides: late acknowledgement, one task at a time, the sweep for the tasks
    of dead workers (every ``visibility_timeout_s / 6``, at most every 10 s, instead of kombu's ~100 s)."""
    sweep = max(1, round(min(_SWEEP_MAX_S, settings.visibility_timeout_s / 6)))
    return {
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {
            # dagster-celery's own: a task sent while the broker is down fails the run within a second
            "max_retries": 3, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5,
            "visibility_timeout": settings.visibility_timeout_s,
            "unacked_restore_interval": sweep,
            "unacked_restore_throttle": 1,
        },
        "result_backend_transport_options": {"visibility_timeout": settings.visibility_timeout_s},
    }


def _broker(settings: CelerySettings) -> str:
    if not settings.broker:
        raise ConfigError("FP_CELERY_BROKER is unset: set it to the broker's URL (redis://host:6379/0) on the code "
                          "location and on every worker")
    return settings.broker


def executor_for(settings: CelerySettings) -> dg.ExecutorDefinition:
    """dagster-celery's executor, configured from ``settings`` (``broker`` set)."""
    broker = _broker(settings)
    return celery_executor.configured({
        "broker": _source(broker, "FP_CELERY_BROKER"),
        "backend": _source(settings.backend or broker, "FP_CELERY_BACKEND" if settings.backend else "FP_CELERY_BROKER"),
        "config_source": delivery(settings),
    })


def judge_step_tags(settings: CelerySettings) -> dict[str, str]:
    """The tags of a judge step: its queue, where it is not the default one."""
    return {} if settings.judge_queue == DEFAULT_QUEUE else {QUEUE_TAG: settings.judge_queue}


def worker_app(env: Mapping[str, str] | None = None) -> Celery:
    """The Celery app of a worker: dagster-celery's step task on the broker the settings name."""
    settings = from_env(CelerySettings, os.environ if env is None else env)
    broker = _broker(settings)
    # dagster-celery's own functions carry no type hints
    executor = CeleryExecutor.for_cli(broker=broker, backend=settings.backend or broker,  # type: ignore[no-untyped-call]
                                      config_source=delivery(settings))
    app: Celery = make_app(executor.app_args())  # type: ignore[no-untyped-call]
    create_task(app)  # type: ignore[no-untyped-call]
    return app


class WarehouseStepIOManager(dg.ConfigurableIOManager):
    """What one step hands the next that is no table (a shard's summary), pickled into the warehouse under
    ``_dagster/<run>/<step>/<output>``: every worker that sees the warehouse sees it, so no step depends on
    the disk of the worker that ran the one before. Safe to delete once its run is over."""

    warehouse: WarehouseResource

    def _place(self, identifier: Sequence[str]) -> Place:
        return self.warehouse.place().child("_dagster", *identifier)

    def handle_output(self, context: dg.OutputContext, obj: object) -> None:
        self._place(context.get_identifier()).write_bytes(pickle.dumps(obj))

    def load_input(self, context: dg.InputContext) -> object:
        upstream = context.upstream_output
        if upstream is None:
            raise dg.DagsterInvariantViolationError(f"{context.name}: no upstream output to load")
        return pickle.loads(self._place(upstream.get_identifier()).read_bytes())
