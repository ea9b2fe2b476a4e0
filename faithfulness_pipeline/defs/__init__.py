"""The Dagster layer: thin wiring of the scoring core (assets, checks, resources, automation).

``build_defs(DefsSettings.from_env())`` is what ``faithfulness_pipeline.definitions`` loads. Every setting is
read from its ``FP_*`` variable through the registry (``faithfulness_pipeline.settings.derive``): the judge's
``FP_JUDGE_*``, the scoring and calibration settings', and the Dagster layer's own (``settings.landing``:
``FP_LANDING``, ``FP_WAREHOUSE``, ``FP_TIMEZONE``, ``FP_PARTITIONS_START``, ...; docs/pipeline.md, "Configuration").
Relative paths resolve from the working directory: run Dagster from the repository root or give absolute
paths.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
from pydantic import BaseModel

from faithfulness_pipeline.defs.assets import build_assets, build_checks
from faithfulness_pipeline.defs.calibration import build_calibration_assets, build_calibration_job
from faithfulness_pipeline.defs.executors import PRELOAD_MODULES, local_executor
from faithfulness_pipeline.defs.io import STEP_IO, WarehouseIOManager
from faithfulness_pipeline.defs.labels import build_labels_job, new_labels
from faithfulness_pipeline.defs.names import LLM_POOL
from faithfulness_pipeline.defs.partitions import daily_partitions
from faithfulness_pipeline.defs.resources import (
    CalibrationResource,
    JudgeResource,
    LabelsResource,
    LandingResource,
    ReviewResource,
    ScoringResource,
    TracesResource,
)
from faithfulness_pipeline.defs.schedules import build_job, build_schedule, build_sensor
from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.settings.calibration import CalibrationSettings
from faithfulness_pipeline.settings.celery import CelerySettings
from faithfulness_pipeline.settings.derive import from_env
from faithfulness_pipeline.settings.derive import settings as registered
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.settings.labels import LabelSettings
from faithfulness_pipeline.settings.landing import LandingSettings, PartitionSettings, WarehouseSettings
from faithfulness_pipeline.settings.review import ReviewSettings
from faithfulness_pipeline.settings.scoring import ScoringSettings
from faithfulness_pipeline.settings.sensitive import holds_password
from faithfulness_pipeline.settings.traces import TraceExportSettings


@dataclass(frozen=True)
class DefsSettings:
    """Everything the code location is built from. Resources stay editable per run in the launchpad; the first
    partition is not a resource: the partitions are fixed when the code location loads."""

    partitions_start: str = PartitionSettings().partitions_start
    judge: JudgeResource = field(default_factory=JudgeResource)
    scoring: ScoringResource = field(default_factory=ScoringResource)
    landing: LandingResource = field(default_factory=LandingResource)
    warehouse: WarehouseResource = field(default_factory=WarehouseResource)
    calibration: CalibrationResource = field(default_factory=CalibrationResource)
    traces: TracesResource = field(default_factory=TracesResource)
    labels: LabelsResource = field(default_factory=LabelsResource)
    review: ReviewResource = field(default_factory=ReviewResource)
    #: Dagster's Celery executor (``FP_CELERY_*``); its broker unset: the local multiprocess executor.
    celery: CelerySettings = field(default_factory=CelerySettings)

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> DefsSettings:
        """The settings from ``FP_*`` variables; a bad value is a ``ConfigError`` naming its variable."""
        env = os.environ if env is None else env
        judge_settings = from_env(JudgeSettings, env)
        key_env = judge_settings.api_key_env
        # dg.EnvVar: Dagster reads the key in each step process and shows only the variable's name.
        judge = JudgeResource(**_given(judge_settings, env), api_key=dg.EnvVar(key_env) if key_env else None)
        scoring = ScoringResource(**_given(from_env(ScoringSettings, env), env))
        landing = LandingResource(**_given(from_env(LandingSettings, env), env))
        landing.zone()  # a bad FP_TIMEZONE stops the code location with one line
        warehouse = WarehouseResource(**_given(from_env(WarehouseSettings, env), env))
        calibration = CalibrationResource(**_given(from_env(CalibrationSettings, env), env))
        traces = TracesResource(**_given(from_env(TraceExportSettings, env), env))
        labels = LabelsResource(**_given(from_env(LabelSettings, env), env))
        review = ReviewResource(**_given(from_env(ReviewSettings, env), env))
        return DefsSettings(
            partitions_start=from_env(PartitionSettings, env).partitions_start,
            judge=judge,
            scoring=scoring,
            landing=landing,
            warehouse=warehouse,
            calibration=calibration,
            traces=traces,
            labels=labels,
            review=review,
            celery=from_env(CelerySettings, env),
        )


def _given(settings: BaseModel, env: Mapping[str, str]) -> dict[str, Any]:
    """The values that differ from the defaults: the resource shows only what was set. A value that holds a
    password (a store's ``postgresql://user:secret@...``) enters as ``dg.EnvVar`` of its variable: Dagster reads
    it in each step process, and run storage (the job snapshot its UI shows) keeps only the variable's name.
    Values from a mapping that is not this process's environment are taken as given."""
    given = settings.model_dump(exclude_defaults=True)
    for setting in registered(type(settings)):
        raw = env.get(setting.env, "").strip()
        # Only a variable of this process can be read back by name (a mapping of one's own cannot).
        if setting.name in given and raw and holds_password(raw) and os.environ.get(setting.env, "").strip() == raw:
            given[setting.name] = dg.EnvVar(setting.env)
    return given


def build_defs(
    settings: DefsSettings | None = None,
    executor: dg.ExecutorDefinition | None = None,
    step_io_manager: dg.ConfigurableIOManager | None = None,
) -> dg.Definitions:
    """The code location. ``executor`` replaces the local multiprocess executor, e.g. with
    ``dagster_k8s.k8s_job_executor`` (one pod per step; the ``llm_judge`` pool still bounds the LLM steps,
    counted in the shared instance database); with ``settings.celery.broker`` set (``FP_CELERY_BROKER``) it is
    dagster-celery's executor, configured by ``defs.celery``, and steps hand each other what is no table
    through the warehouse.
    ``step_io_manager`` replaces the local filesystem IO manager of what steps hand each other (a shard's
    summary) with one every pod sees, e.g. ``dagster_aws.s3.S3PickleIOManager``."""
    settings = settings or DefsSettings()
    partitions = daily_partitions(settings.partitions_start, settings.landing.zone())
    model, prompt_version = settings.judge.identity()
    judge_tags: dict[str, str] = {}
    if settings.celery.broker:  # steps on Celery workers: what they hand each other goes where all see it
        from faithfulness_pipeline.defs import celery  # dagster-celery imports celery: only when asked for

        executor = executor or celery.executor_for(settings.celery)
        step_io_manager = step_io_manager or celery.WarehouseStepIOManager(warehouse=settings.warehouse)
        judge_tags = celery.judge_step_tags(settings.celery)
    assets = build_assets(partitions, judge_version=f"{model}:{prompt_version}", traces=settings.traces,
                          table_format=settings.warehouse.format_name(), judge_tags=judge_tags)
    assets += build_calibration_assets(f"{model}:{prompt_version}", LLM_POOL)
    job = build_job()
    return dg.Definitions(
        assets=assets,
        asset_checks=build_checks(partitions),
        jobs=[job, build_calibration_job(), build_labels_job()],
        schedules=[build_schedule(job)],
        sensors=[build_sensor(job, partitions), new_labels],
        resources={
            "judge": settings.judge,
            "scoring": settings.scoring,
            "landing": settings.landing,
            "warehouse": settings.warehouse,
            "io_manager": WarehouseIOManager(warehouse=settings.warehouse),
            STEP_IO: step_io_manager or dg.FilesystemIOManager(),
            "calibration": settings.calibration,
            "traces": settings.traces,
            "labels": settings.labels,
            "review": settings.review,
        },
        executor=executor or local_executor(),
    )


__all__ = [
    "PRELOAD_MODULES",
    "CalibrationResource",
    "DefsSettings",
    "JudgeResource",
    "LandingResource",
    "ReviewResource",
    "ScoringResource",
    "WarehouseIOManager",
    "WarehouseResource",
    "build_defs",
]
