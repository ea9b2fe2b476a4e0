"""What the package knows about its judges by the name a scored table records (``judge_model``): which of
them are baselines rather than the product's judges, and what a reader of their scores must be told.

Entry points that read scored tables (the report, calibration, the Dagster checks, the demo) ask here
instead of importing one adapter's constants; the answers come from the judge kinds' registrations
(``judging.kinds``), so a judge added later is described by its own. A built judge tells its own notes
through ``Judge.stats().notes``."""

from __future__ import annotations

from faithfulness_pipeline.judging.kinds import Baseline, kind_for, registered
from faithfulness_pipeline.settings.judge import JudgeSettings


def _baselines() -> list[Baseline]:
    return [kind.baseline for kind in registered() if kind.baseline is not None]


def baseline_judges() -> frozenset[str]:
    """The ``judge_model`` names of judges whose scores are a baseline, not the product's."""
    return frozenset(baseline.judge_model for baseline in _baselines())


def note_on(judge_model: str) -> str | None:
    """What a reader must know about scores recorded under ``judge_model`` (also when the name is part of a
    longer one, e.g. a run that mixed judges), or None when nothing needs saying."""
    return next((baseline.note for baseline in _baselines() if baseline.judge_model in judge_model), None)


def judge_identity(model: str | None) -> tuple[str, str]:
    """(judge model, prompt version) of the judge that ``model`` (None or empty: no model set) selects, without
    building it or importing litellm: what code versions are made of."""
    settings = JudgeSettings(model=model or None)
    return kind_for(settings).identity(settings)
