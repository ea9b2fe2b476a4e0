"""The Dagster layer: thin wiring of the scoring core (assets, checks, resources, automation).

``build_defs(DefsSettings.from_env())`` is what ``faithfulness_pipeline.definitions`` loads. Every setting is
read from its ``FP_*`` variable through the registry (``faithfulness_pipeline.settings.derive``): the judge's
``FP_JUDGE_*``, the scoring and calibration settings', and the Dagster layer's own (``settings.landing``:
``FP_LANDING``, ``FP_WAREHOUSE``, ``FP_TIMEZONE``, ``FP_PARTITIONS_START``, ...; docs/pipeline.md, "Configuration").
Relative paths resolve from the working directory: run Dagster from the repository root or give absolute
paths.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import dagster as dg
from pydantic import BaseModel

from faithfulness_pipeline.defs.assets import build_assets, build_checks
from faithfulness_pipeline.defs.calibration import build_calibration_assets, build_calibration_job
from faithfulness_pipeline.defs.io import STEP_IO, WarehouseIOManager
from faithfulness_pipeline.defs.names import LLM_POOL
from faithfulness_pipeline.defs.partitions import daily_partitions
from faithfulness_pipeline.defs.resources import (
    CalibrationResource,
    JudgeResource,
    LandingResource,
    ScoringResource,
    TracesResource,
)
from faithfulness_pipeline.defs.schedules import build_job, build_schedule, build_sensor
from faithfulness_pipeline.defs.traces import build_trace_assets
from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.settings.calibration import CalibrationSettings
from faithfulness_pipeline.settings.celery import CelerySettings
from faithfulness_pipeline.settings.derive import from_env
from faithfulness_pipeline.settings.derive import settings as registered
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.settings.landing import LandingSettings, PartitionSettings, WarehouseSettings
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
        return DefsSettings(
            partitions_start=from_env(PartitionSettings, env).partitions_start,
            judge=judge,
            scoring=scoring,
            landing=landing,
            warehouse=warehouse,
            calibration=calibration,
            traces=traces,
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
    assets = build_assets(partitions, judge_version=f"{model}:{prompt_version}", judge_tags=judge_tags)
    assets += build_calibration_assets(f"{model}:{prompt_version}", LLM_POOL)
    assets += build_trace_assets(partitions, settings.traces)
    job = build_job()
    return dg.Definitions(
        assets=assets,
        asset_checks=build_checks(partitions),
        jobs=[job, build_calibration_job()],
        schedules=[build_schedule(job)],
        sensors=[build_sensor(job, partitions)],
        resources={
            "judge": settings.judge,
            "scoring": settings.scoring,
            "landing": settings.landing,
            "warehouse": settings.warehouse,
            "io_manager": WarehouseIOManager(warehouse=settings.warehouse),
            STEP_IO: step_io_manager or dg.FilesystemIOManager(),
            "calibration": settings.calibration,
            "traces": settings.traces,
        },
        executor=executor or _executor(),
    )


# What the fork server imports before forking step processes. The dagster module is internal (no public
# way to name it) and the fork server skips a module that does not import without a word:
# tests/defs/test_private_dagster.py is what notices (checked with preload.CHECKED_WITH_DAGSTER).
PRELOAD_MODULES = ("dagster._core.executor.multiprocess", "faithfulness_pipeline.defs.preload")


#: The fork server listens on a Unix socket at <temp dir>/pymp-XXXXXXXX/listener-XXXXXXXX (multiprocessing's
#: own naming), and a socket path holds at most 107 bytes: under a longer temp dir no step could start.
_SOCKET_PATH_MAX: Final = 107
_FORK_SERVER_SOCKET_TAIL: Final = len("/pymp-XXXXXXXX/listener-XXXXXXXX")


def _executor() -> dg.ExecutorDefinition:
    """Multiprocess, one process per step. Where the OS has it, step processes fork from a server that
    has already imported the code location and Dagster's storage layer (``defs/preload.py``): a step
    starts in a fraction of a second instead of the seconds a fresh interpreter needs (``spawn``)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return dg.multiprocess_executor
    temp = tempfile.gettempdir()
    if len(os.fsencode(temp)) + _FORK_SERVER_SOCKET_TAIL > _SOCKET_PATH_MAX:
        if multiprocessing.parent_process() is None:  # said once by the run, not again by each step process
            logging.getLogger(__name__).warning(
                "steps start as fresh processes (slower): the temporary folder %s is too long for the fork "
                "server's socket path (at most %d bytes); set TMPDIR to a shorter folder to start them faster",
                temp, _SOCKET_PATH_MAX - _FORK_SERVER_SOCKET_TAIL,
            )
        return dg.multiprocess_executor
    preload = list(PRELOAD_MODULES)
    return dg.multiprocess_executor.configured({"start_method": {"forkserver": {"preload_modules": preload}}})


__all__ = [
    "CalibrationResource",
    "DefsSettings",
    "JudgeResource",
    "LandingResource",
    "ScoringResource",
    "WarehouseIOManager",
    "WarehouseResource",
    "build_defs",
]
