"""Dagster resources: the judge, the scoring settings, the landing location (the warehouse: ``defs.warehouse``).

Every field is described, so the Dagster UI (Deployment > Resources) documents them. Secrets come only
from the environment: set ``api_key`` with ``dg.EnvVar("OPENAI_API_KEY")`` (``definitions.py`` does when
``FP_JUDGE_API_KEY_ENV`` names the variable); Dagster then shows the variable's name, never its value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dagster as dg
from pydantic import BaseModel, Field, ValidationError

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.defs.warehouse import WarehouseResource  # a resource like these, in a module of its own
from faithfulness_pipeline.judging.catalog import judge_identity
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.judging.stack import JudgeStack
from faithfulness_pipeline.settings.calibration import CalibrationSettings
from faithfulness_pipeline.settings.derive import config_error
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.settings.labels import LabelSettings
from faithfulness_pipeline.settings.landing import LandingSettings
from faithfulness_pipeline.settings.review import ReviewSettings
from faithfulness_pipeline.settings.scoring import ScoringSettings
from faithfulness_pipeline.settings.traces import TraceExportSettings


class JudgeResource(dg.ConfigurableResource, JudgeSettings):  # type: ignore[type-arg]
    """The LLM judge. No ``model`` = the offline lexical judge (deterministic, no network, no key).

    Every field but ``api_key`` is a ``JudgeSettings`` field (described there, and in docs/settings.md).
    Several LLM steps may run at once (the 'llm_judge' pool limit in dagster.yaml): give each step the
    provider's rpm / tpm divided by the pool limit.
    """

    api_key: str | None = Field(
        default=None,
        description="The API key itself. Set it only with dg.EnvVar('NAME') so it never appears in config or logs.",
    )

    def __init__(self, **data: Any) -> None:
        _validated(super().__init__, JudgeSettings, data)

    def settings(self, default_store: str | None = None, *, remote_warehouse: bool = False) -> JudgeSettings:
        """The judge's settings; the default store serves the litellm judge (the offline one needs no store
        unless one is set). A warehouse in an object store has no default store to give."""
        values = {name: getattr(self, name) for name in JudgeSettings.model_fields}
        if self.model is not None and values["store"] is None:
            if remote_warehouse:  # no SQLite file beside tables in a bucket
                raise ConfigError(
                    "the LLM judge keeps its results in a store, and the warehouse is in an object store, which "
                    "cannot hold the default SQLite file: set FP_JUDGE_STORE (judge.store) to a postgresql:// URL "
                    "the workers share, or a local path"
                )
            values["store"] = default_store
        return JudgeSettings(**values)

    def make(self, default_store: str | None = None, report: Callable[[str], None] | None = None, *,
             remote_warehouse: bool = False, receiving: Callable[[int], None] | None = None) -> JudgeStack:
        """A fresh judge for one step (close it with ``await judge.aclose()`` at the end of the step);
        ``report`` hears how the judge's long jobs go (batch mode), ``receiving`` how many reply tokens just
        arrived on a streamed request."""
        return make_judge(self.settings(default_store, remote_warehouse=remote_warehouse),
                          api_key=self.api_key or None, check_connection=True, report=report, receiving=receiving)

    def identity(self) -> tuple[str, str]:
        """(judge model, prompt version) of what this resource judges with, without building the judge."""
        return judge_identity(self.model)


class ScoringResource(dg.ConfigurableResource, ScoringSettings):  # type: ignore[type-arg]
    """How rows are read and scored, and the thresholds of the checks and BI aggregates: the
    ``ScoringSettings`` fields (described there, and in docs/settings.md)."""

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
    (described there, and in docs/settings.md)."""


class TracesResource(dg.ConfigurableResource, TraceExportSettings):  # type: ignore[type-arg]
    """Where scores go back to traces: the ``TraceExportSettings`` fields (described there, and in
    docs/settings.md)."""


class LabelsResource(dg.ConfigurableResource, LabelSettings):  # type: ignore[type-arg]
    """People's labels of the corrected figures: the ``LabelSettings`` fields (described there, and in
    docs/settings.md)."""


class ReviewResource(dg.ConfigurableResource, ReviewSettings):  # type: ignore[type-arg]
    """People's review of the judge: the ``ReviewSettings`` fields (described there, and in docs/settings.md).
    Read by the day's ``review_queue`` alone."""

    def __init__(self, **data: Any) -> None:
        _validated(super().__init__, ReviewSettings, data)


class LandingResource(dg.ConfigurableResource, LandingSettings):  # type: ignore[type-arg]
    """Where raw conversations land: the ``LandingSettings`` fields (described there, and in
    docs/settings.md). ``timezone`` is best set with FP_TIMEZONE: the partitions are fixed when the code location
    loads."""

__all__ = ["CalibrationResource", "JudgeResource", "LabelsResource", "LandingResource", "ReviewResource",
           "ScoringResource",
           "TracesResource", "WarehouseResource"]
