"""The Celery executor's settings (``FP_CELERY_*``): a day's steps as Celery tasks on workers of many machines.

Unset broker: the local multiprocess executor. They are fixed when the code location loads (the executor is
part of the definitions), and every Celery worker reads the same variables (``defs.celery_app``), so the
code location and its workers cannot disagree about the broker or the queues.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from faithfulness_pipeline.settings.model_config import SETTINGS_CONFIG


class CelerySettings(BaseModel):
    """Dagster's Celery executor (dagster-celery) and its workers; docs/scaling-out.md has the recipe."""

    model_config = SETTINGS_CONFIG

    broker: str | None = Field(
        default=None,
        description="Celery broker URL (redis://host:6379/0): set, every step runs as a task of Dagster's Celery "
        "executor on the workers listening there; unset, steps run as local processes",
    )
    backend: str | None = Field(
        default=None, description="Celery result backend URL, where workers hand back a step's events (unset: the "
        "broker's URL)",
    )
    judge_queue: str = Field(
        default="dagster", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$",
        description="Celery queue of the LLM judge's steps (dagster: the queue of every step); a queue of their "
        "own lets the workers listening on it, and their concurrency, bound how many judge at once",
    )
    visibility_timeout_s: float = Field(
        default=3600.0, gt=0,
        description="seconds after which a step whose worker died (SIGKILL, a lost machine) is handed to another "
        "worker; longer than the longest step, or a slow step is also run a second time",
    )
