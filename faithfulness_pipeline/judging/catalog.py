"""What the package knows about its judges by the name a scored table records (``judge_model``): which of
them are baselines rather than the product's judges, and what a reader of their scores must be told.

Entry points that read scored tables (the report, calibration, the Dagster checks, the demo) ask here
instead of importing one adapter's constants, so a judge added later is described in this one place; a
built judge tells its own notes through ``Judge.stats().notes``."""

from __future__ import annotations

from faithfulness_pipeline.judging.offline.judge import (
    OFFLINE_FALLBACK_NOTE,
    OFFLINE_MODEL_NAME,
    OFFLINE_PROMPT_VERSION,
)

# judge_model → the note every reader of its scores gets; a judge listed here is a baseline.
_BASELINES: dict[str, str] = {OFFLINE_MODEL_NAME: OFFLINE_FALLBACK_NOTE}


def baseline_judges() -> frozenset[str]:
    """The ``judge_model`` names of judges whose scores are a baseline, not the product's."""
    return frozenset(_BASELINES)


def note_on(judge_model: str) -> str | None:
    """What a reader must know about scores recorded under ``judge_model`` (also when the name is part of a
    longer one, e.g. a run that mixed judges), or None when nothing needs saying."""
    return next((note for name, note in _BASELINES.items() if name in judge_model), None)


def judge_identity(model: str | None) -> tuple[str, str]:
    """(judge model, prompt version) of the judge that ``model`` (None: no model set) selects, without
    building it or importing litellm: what code versions are made of."""
    if not model:
        return OFFLINE_MODEL_NAME, OFFLINE_PROMPT_VERSION
    from faithfulness_pipeline.judging.llm.prompts import PROMPT_VERSION

    return model, PROMPT_VERSION
