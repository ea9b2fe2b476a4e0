"""The Dagster layer: thin wiring of the scoring core (assets, checks, resources, automation).

``build_defs(DefsSettings.from_env())`` is what ``faithfulness_pipeline.definitions`` loads. Environment
variables (all optional; relative paths resolve from the working directory, so run Dagster from the
repository root or give absolute paths):

=============================  =========================================================================
``FP_LANDING``                 landing location: Parquet file, folder or glob (default ``sample_data``)
``FP_TIMESTAMP_COLUMN``        column that picks a row's day (default ``created_at``)
``FP_UNDATED_DAY``             day for rows without a timestamp (default: the file's arrival day)
``FP_WAREHOUSE``               warehouse root (default ``warehouse``)
``FP_DUCKDB``                  DuckDB file (default ``<warehouse>/answer_quality.duckdb``)
``FP_PARTITIONS_START``        first daily partition (default ``2026-11-24``, the sample data)
``FP_JUDGE_MODEL``             litellm model; unset = the offline judge
``FP_JUDGE_API_BASE``          base URL of an OpenAI-compatible server
``FP_JUDGE_API_KEY_ENV``       name of the variable holding the API key (read through ``dg.EnvVar``)
``FP_JUDGE_MAX_CONCURRENCY``   requests in flight per LLM step
``FP_JUDGE_RPM`` / ``_TPM``    request / token rate limits per LLM step
``FP_JUDGE_TIMEOUT_S``         request timeout
``FP_JUDGE_PACK_TOKENS``       prompt-token budget of a packed request
``FP_JUDGE_STORE``             result store (default ``<warehouse>/_judge_store.sqlite``)
``FP_JUDGE_BACKOFF_BASE_S``    first back-off after a failed request or a 429 without Retry-After (default 1)
``FP_JUDGE_BACKOFF_MAX_S``     longest back-off (default 60)
``FP_SCALE``                   score scale (default 1)
``FP_HALLUCINATION_THRESHOLD`` BI threshold in score units (default 0.5)
``FP_MAX_ERROR_RATE``          error-rate check limit (default 0.05)
=============================  =========================================================================
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import dagster as dg

from faithfulness_pipeline.defs.assets import build_assets, build_checks
from faithfulness_pipeline.defs.io import WarehouseIOManager
from faithfulness_pipeline.defs.partitions import DEFAULT_START, daily_partitions
from faithfulness_pipeline.defs.resources import (
    JudgeResource,
    LandingResource,
    ScoringResource,
    WarehouseResource,
    judge_identity,
)
from faithfulness_pipeline.defs.schedules import build_job, build_schedule, build_sensor


def _int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    return int(value) if value else None


def _float(env: Mapping[str, str], name: str) -> float | None:
    value = env.get(name)
    return float(value) if value else None


def _float_or(env: Mapping[str, str], name: str, default: float) -> float:
    value = _float(env, name)
    return default if value is None else value


@dataclass(frozen=True)
class DefsSettings:
    """Everything the code location is built from. Resources stay editable per run in the launchpad."""

    partitions_start: str = DEFAULT_START
    judge: JudgeResource = field(default_factory=JudgeResource)
    scoring: ScoringResource = field(default_factory=ScoringResource)
    landing: LandingResource = field(default_factory=LandingResource)
    warehouse: WarehouseResource = field(default_factory=WarehouseResource)

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> DefsSettings:
        env = os.environ if env is None else env
        key_env = env.get("FP_JUDGE_API_KEY_ENV") or None
        judge = JudgeResource(
            model=env.get("FP_JUDGE_MODEL") or None,
            api_base=env.get("FP_JUDGE_API_BASE") or None,
            api_key_env=key_env,
            # dg.EnvVar: Dagster reads the key in each step process and shows only the variable's name.
            api_key=dg.EnvVar(key_env) if key_env else None,
            max_concurrency=_int(env, "FP_JUDGE_MAX_CONCURRENCY"),
            rpm=_int(env, "FP_JUDGE_RPM"),
            tpm=_int(env, "FP_JUDGE_TPM"),
            timeout_s=_float(env, "FP_JUDGE_TIMEOUT_S"),
            pack_tokens=_int(env, "FP_JUDGE_PACK_TOKENS"),
            store_path=env.get("FP_JUDGE_STORE") or None,
            backoff_base_s=_float(env, "FP_JUDGE_BACKOFF_BASE_S"),
            backoff_max_s=_float(env, "FP_JUDGE_BACKOFF_MAX_S"),
        )
        scoring = ScoringResource(
            scale=_float_or(env, "FP_SCALE", 1.0),
            hallucination_threshold=_float_or(env, "FP_HALLUCINATION_THRESHOLD", 0.5),
            max_error_rate=_float_or(env, "FP_MAX_ERROR_RATE", 0.05),
        )
        landing = LandingResource(
            path=env.get("FP_LANDING") or "sample_data",
            timestamp_column=env.get("FP_TIMESTAMP_COLUMN") or "created_at",
            undated_day=env.get("FP_UNDATED_DAY") or None,
        )
        warehouse = WarehouseResource(root=env.get("FP_WAREHOUSE") or "warehouse", duckdb_path=env.get("FP_DUCKDB"))
        return DefsSettings(
            partitions_start=env.get("FP_PARTITIONS_START") or DEFAULT_START,
            judge=judge,
            scoring=scoring,
            landing=landing,
            warehouse=warehouse,
        )


def build_defs(settings: DefsSettings | None = None, executor: dg.ExecutorDefinition | None = None) -> dg.Definitions:
    """The code location. ``executor`` replaces the local multiprocess executor, e.g. with
    ``dagster_k8s.k8s_job_executor`` or ``dagster_celery.celery_executor`` (one pod / Celery task per step;
    the ``llm_judge`` pool still bounds the LLM steps, counted in the shared instance database)."""
    settings = settings or DefsSettings()
    partitions = daily_partitions(settings.partitions_start)
    model, prompt_version = judge_identity(settings.judge.model)
    assets = build_assets(partitions, judge_version=f"{model}:{prompt_version}")
    job = build_job()
    return dg.Definitions(
        assets=assets,
        asset_checks=build_checks(partitions),
        jobs=[job],
        schedules=[build_schedule(job)],
        sensors=[build_sensor(job, partitions)],
        resources={
            "judge": settings.judge,
            "scoring": settings.scoring,
            "landing": settings.landing,
            "warehouse": settings.warehouse,
            "io_manager": WarehouseIOManager(warehouse=settings.warehouse),
        },
        executor=executor or _executor(),
    )


# What the fork server imports before forking step processes. The dagster module is internal (no public
# way to name it) and the fork server skips a module that does not import without a word:
# tests/defs/test_private_dagster.py is what notices (checked with preload.CHECKED_WITH_DAGSTER).
PRELOAD_MODULES = ("dagster._core.executor.multiprocess", "faithfulness_pipeline.defs.preload")


def _executor() -> dg.ExecutorDefinition:
    """Multiprocess, one process per step. Where the OS has it, step processes fork from a server that
    has already imported the code location and Dagster's storage layer (``defs/preload.py``): a step
    starts in a fraction of a second instead of the seconds a fresh interpreter needs (``spawn``)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return dg.multiprocess_executor
    preload = list(PRELOAD_MODULES)
    return dg.multiprocess_executor.configured({"start_method": {"forkserver": {"preload_modules": preload}}})


__all__ = [
    "DefsSettings",
    "JudgeResource",
    "LandingResource",
    "ScoringResource",
    "WarehouseIOManager",
    "WarehouseResource",
    "build_defs",
]
