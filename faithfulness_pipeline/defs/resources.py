"""Dagster resources: the judge, the scoring settings, the landing location and the warehouse.

Every field is described, so the Dagster UI (Deployment > Resources) documents them. Secrets come only
from the environment: set ``api_key`` with ``dg.EnvVar("OPENAI_API_KEY")`` (``definitions.py`` does when
``FP_JUDGE_API_KEY_ENV`` names the variable); Dagster then shows the variable's name, never its value.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
from pydantic import BaseModel, Field, ValidationError

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.io import atomic_path
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.judging.stack import JudgeStack
from faithfulness_pipeline.settings.calibration import CalibrationSettings
from faithfulness_pipeline.settings.derive import config_error
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.settings.landing import LandingSettings, WarehouseSettings
from faithfulness_pipeline.settings.scoring import ScoringSettings


class JudgeResource(dg.ConfigurableResource, JudgeSettings):  # type: ignore[type-arg]
    """The LLM judge. No ``model`` = the offline lexical judge (deterministic, no network, no key).

    Every field but ``api_key`` is a ``JudgeSettings`` field (described there, and in the README's table).
    Several LLM steps may run at once (the 'llm_judge' pool limit in dagster.yaml): give each step the
    provider's rpm / tpm divided by the pool limit.
    """

    api_key: str | None = Field(
        default=None,
        description="The API key itself. Set it only with dg.EnvVar('NAME') so it never appears in config or logs.",
    )

    def __init__(self, **data: Any) -> None:
        _validated(super().__init__, JudgeSettings, data)

    def settings(self, default_store: str | None = None) -> JudgeSettings:
        """The judge's settings; the default store serves the litellm judge (the offline one needs no store
        unless one is set)."""
        values = {name: getattr(self, name) for name in JudgeSettings.model_fields}
        if self.model is not None and values["store"] is None:
            values["store"] = default_store
        return JudgeSettings(**values)

    def make(self, default_store: str | None = None, report: Callable[[str], None] | None = None) -> JudgeStack:
        """A fresh judge for one step (close it with ``await judge.aclose()`` at the end of the step);
        ``report`` hears how the judge's long jobs go (batch mode)."""
        return make_judge(self.settings(default_store), api_key=self.api_key or None, check_connection=True,
                          report=report)

    def identity(self) -> tuple[str, str]:
        """(judge model, prompt version) of what this resource judges with, without building the judge."""
        return judge_identity(self.model)


def judge_identity(model: str | None) -> tuple[str, str]:
    """(judge model, prompt version) without building a judge or importing litellm: for code versions."""
    if not model:
        from faithfulness_pipeline.judging.offline.judge import OFFLINE_MODEL_NAME, OFFLINE_PROMPT_VERSION

        return OFFLINE_MODEL_NAME, OFFLINE_PROMPT_VERSION
    from faithfulness_pipeline.judging.llm.prompts import PROMPT_VERSION

    return model, PROMPT_VERSION


class ScoringResource(dg.ConfigurableResource, ScoringSettings):  # type: ignore[type-arg]
    """How rows are read and scored, and the thresholds of the checks and BI aggregates: the
    ``ScoringSettings`` fields (described there, and in the README's table)."""

    def __init__(self, **data: Any) -> None:
        _validated(super().__init__, ScoringSettings, data)


def _validated(init: Callable[..., None], model: type[BaseModel], data: dict[str, Any]) -> None:
    """A field out of range (set in the launchpad or in code) is the one-line error naming the setting's
    flag, variable and field that the CLI gives, not pydantic's report."""
    try:
        init(**data)
    except ValidationError as exc:
        raise config_error(model, exc) from None


class CalibrationResource(dg.ConfigurableResource, CalibrationSettings):  # type: ignore[type-arg]
    """Where the labelled rows are and how calibration reports: the ``CalibrationSettings`` fields
    (described there, and in the README's table)."""


class LandingResource(dg.ConfigurableResource, LandingSettings):  # type: ignore[type-arg]
    """Where raw conversations land: the ``LandingSettings`` fields (described there, and in the README's
    table). ``timezone`` is best set with FP_TIMEZONE: the partitions are fixed when the code location loads."""


def _one_component(value: str, what: str) -> None:
    if any(sep in value for sep in ("/", "\\", "\0")) or value in (".", ".."):
        raise ConfigError(f"{what} {value!r} would not be one folder name inside the warehouse")


def _inside(root: Path, relative: str, what: str) -> Path:
    """``root / relative``, refused when a key or name (``..``, an absolute path) would lead outside ``root``.

    Lexical on purpose: a table folder that is a symlink to another disk stays allowed."""
    path = Path(os.path.normpath(root / relative))
    if "\\" in relative or "\0" in relative or not path.is_relative_to(root) or path == root:
        raise ConfigError(f"{what} {relative!r} leads outside the warehouse root {str(root)!r}")
    return path


class WarehouseResource(dg.ConfigurableResource, WarehouseSettings):  # type: ignore[type-arg]
    """Where tables are written: ``<root>/<table>/ds=YYYY-MM-DD/data.parquet``, one file per day. The fields are
    the ``WarehouseSettings`` fields (described there, and in the README's table)."""

    def judge_store(self) -> str:
        return str(self.root_path() / "_judge_store.sqlite")

    def table_dir(self, table: str) -> Path:
        return _inside(self.root_path(), table, "table name")

    def partition_file(self, table: str, partition_key: str | None) -> Path:
        base = self.table_dir(table)
        if partition_key:
            _one_component(partition_key, "partition key")
            base = _inside(base, f"ds={partition_key}", "partition key")
        return base / "data.parquet"

    def write(self, table: str, partition_key: str | None, frame: pl.DataFrame) -> Path:
        """Replace exactly one partition: a complete new file swapped in, then any stray files removed."""
        target = self.partition_file(table, partition_key)
        with atomic_path(target, suffix=".parquet") as tmp:
            frame.write_parquet(tmp, compression="zstd", statistics=True)
        for other in target.parent.glob("*.parquet"):
            # Files another writer (or an older layout) left in this partition would duplicate its rows.
            if other.name != target.name:
                other.unlink(missing_ok=True)
        return target

    def read(self, table: str, partition_keys: list[str] | None) -> pl.DataFrame:
        keys: list[str | None] = list(partition_keys) if partition_keys else [None]
        frames = []
        for key in keys:
            path = self.partition_file(table, key)
            if not path.exists():
                raise FileNotFoundError(
                    f"{table} has no data for partition {key or '(unpartitioned)'} at {path}: materialise it first"
                )
            frames.append(pl.read_parquet(path))
        return frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")
