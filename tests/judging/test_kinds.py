"""The judge kinds' registry (``judging.kinds``): the kinds it selects are the ones the factory's branches
chose, the catalog tells what it told, a kind registered by a test is built and described with no change
to the factory or the catalog, and nothing of it imports litellm."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import polars as pl
import pytest

from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.judging import kinds
from faithfulness_pipeline.judging.catalog import baseline_judges, judge_identity, note_on
from faithfulness_pipeline.judging.factory import check_key, make_judge
from faithfulness_pipeline.judging.kinds import Baseline, Built, JudgeKind, kind_for
from faithfulness_pipeline.judging.llm.batch.judge import NEEDS_A_STORE
from faithfulness_pipeline.judging.llm.prompts import PROMPT_VERSION
from faithfulness_pipeline.judging.offline.judge import (
    OFFLINE_FALLBACK_NOTE,
    OFFLINE_MODEL_NAME,
    OFFLINE_PROMPT_VERSION,
    OfflineJudge,
)
from faithfulness_pipeline.judging.stack import JudgeStack
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.marker_judge import MarkerJudge

ROOT = Path(__file__).resolve().parents[2]
MISSING_KEY = "FP_TEST_KINDS_NO_SUCH_KEY"


def _branches_before(settings: JudgeSettings) -> str:
    """What ``make_judge`` chose by branching before the registry: the offline judge without a model, the
    batch judge in batch mode, else the litellm judge."""
    if settings.model is None:
        return "offline"
    return "batch" if settings.mode == "batch" else "litellm"


@pytest.mark.parametrize(
    ("model", "mode", "store"),
    list(itertools.product([None, "", "  ", "openai/gpt-4o-mini", "ollama/llama3"], ["interactive", "batch"],
                           [None, "results.sqlite"])),
)
def test_the_registry_selects_the_kind_the_factory_chose_by_branching(
    model: str | None, mode: Literal["interactive", "batch"], store: str | None
) -> None:
    settings = JudgeSettings(model=model, mode=mode, store=store)
    assert kind_for(settings).name == _branches_before(settings)


def test_the_offline_kind_builds_the_offline_judge_with_the_store_it_is_given(tmp_path: Path) -> None:
    bare = make_judge(JudgeSettings())
    assert isinstance(bare.inner, OfflineJudge) and bare.store is None
    stored = make_judge(JudgeSettings(store=str(tmp_path / "offline.sqlite")))
    assert stored.store is not None
    try:
        assert isinstance(stored.inner, OfflineJudge) and (tmp_path / "offline.sqlite").exists()
    finally:
        stored.store.close()


class _Store:
    """Stands in for the result store ``open_store`` would open: says whether it was opened and closed."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[_Store]:
    """Every store the kinds open, in the order they open them (none is a real store)."""
    stores: list[_Store] = []

    def open_store(spec: str) -> _Store:
        stores.append(_Store())
        return stores[-1]

    monkeypatch.setattr("faithfulness_pipeline.judging.store.open.open_store", open_store)
    monkeypatch.delenv(MISSING_KEY, raising=False)
    return stores


def test_batch_mode_without_a_model_fails_before_a_store_is_opened(opened: list[_Store]) -> None:
    with pytest.raises(ConfigError) as failed:
        make_judge(JudgeSettings(mode="batch", store="results.sqlite"))
    assert str(failed.value) == "batch mode needs a model (--model, FP_JUDGE_MODEL): the offline judge sends nothing"
    assert opened == []


def test_batch_mode_without_a_store_names_the_setting(opened: list[_Store]) -> None:
    with pytest.raises(ConfigError) as failed:
        make_judge(JudgeSettings(model="openai/gpt-4o-mini", mode="batch", api_key_env=MISSING_KEY))
    assert str(failed.value) == NEEDS_A_STORE
    assert opened == []


def test_a_missing_key_fails_before_the_litellm_judge_opens_its_store(opened: list[_Store]) -> None:
    settings = JudgeSettings(model="openai/gpt-4o-mini", api_key_env=MISSING_KEY, store="results.sqlite")
    with pytest.raises(ConfigError, match=MISSING_KEY):
        make_judge(settings)
    assert opened == []
    with pytest.raises(ConfigError, match=MISSING_KEY):
        check_key(settings)


def test_the_batch_judge_closes_the_store_it_opened_when_it_cannot_be_built(opened: list[_Store]) -> None:
    with pytest.raises(ConfigError, match=MISSING_KEY):
        make_judge(JudgeSettings(model="openai/gpt-4o-mini", mode="batch", api_key_env=MISSING_KEY,
                                 store="results.sqlite"))
    assert len(opened) == 1 and opened[0].closed


def test_the_catalog_tells_what_it_told_before_the_registry() -> None:
    assert judge_identity(None) == judge_identity("") == (OFFLINE_MODEL_NAME, OFFLINE_PROMPT_VERSION)
    assert judge_identity("openai/gpt-4o-mini") == ("openai/gpt-4o-mini", PROMPT_VERSION)
    assert baseline_judges() == frozenset({OFFLINE_MODEL_NAME})
    assert note_on(OFFLINE_MODEL_NAME) == OFFLINE_FALLBACK_NOTE
    assert note_on(f"openai/gpt-4o-mini+{OFFLINE_MODEL_NAME}") == OFFLINE_FALLBACK_NOTE  # a run of mixed judges
    assert note_on("openai/gpt-4o-mini") is None


# ----------------------------------------------------------------------------------- a kind of the test's own

MARKER_NOTE = "scores of the marker judge follow the markers the test wrote, not the context"


@pytest.fixture
def marker_kind() -> Iterator[JudgeKind]:
    """A kind of the test's own for models named marker/...: a model the litellm kind would otherwise take."""
    kind = kinds.register(JudgeKind(
        "marker", selects=lambda settings: (settings.model or "").startswith("marker/"),
        build=lambda settings, options: Built(MarkerJudge()),
        identity=lambda settings: (settings.model or "", MarkerJudge.prompt_version),
        baseline=Baseline(MarkerJudge.model_name, MARKER_NOTE),
    ))
    try:
        yield kind
    finally:
        kinds.unregister("marker")


def test_a_registered_kind_is_built_and_described_with_no_change_to_factory_or_catalog(
    marker_kind: JudgeKind,
) -> None:
    settings = JudgeSettings(model="marker/any")
    judge = make_judge(settings)
    assert isinstance(judge, JudgeStack) and isinstance(judge.inner, MarkerJudge)
    frame = pl.DataFrame({"output": ["Paris is in France. It has [C] two moons."],
                          "context": [["Paris is in France."]]})
    scored = score_frame(frame, judge)
    assert scored.get_column("faithfulness_score").to_list() == [0.5]  # one claim of two contradicted
    assert judge.inner.extract_calls  # the marker judge answered, not the litellm judge
    check_key(settings)  # the kind needs no key
    assert judge_identity("marker/any") == ("marker/any", MarkerJudge.prompt_version)
    assert baseline_judges() == frozenset({OFFLINE_MODEL_NAME, MarkerJudge.model_name})
    assert note_on(MarkerJudge.model_name) == MARKER_NOTE


def test_an_unregistered_kind_leaves_its_settings_to_the_built_in_kinds(marker_kind: JudgeKind) -> None:
    kinds.unregister("marker")
    try:
        assert kind_for(JudgeSettings(model="marker/any")).name == "litellm"
        assert judge_identity("marker/any") == ("marker/any", PROMPT_VERSION)
        assert note_on(MarkerJudge.model_name) is None
    finally:
        kinds.register(marker_kind)  # for the fixture to take away


def test_a_kind_name_is_registered_once() -> None:
    offline = kind_for(JudgeSettings())
    with pytest.raises(ValueError, match="registered already"):
        kinds.register(offline)
    with pytest.raises(KeyError, match="no judge kind named"):
        kinds.unregister("no-such-kind")


# ------------------------------------------------------------------------------------------------ imports

_PROBE = r"""
import json, sys
from faithfulness_pipeline.judging import kinds
from faithfulness_pipeline.judging.catalog import baseline_judges, judge_identity, note_on
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.settings.judge import JudgeSettings

told = [judge_identity(None), judge_identity("openai/gpt-4o-mini"), sorted(baseline_judges()),
        note_on("openai/gpt-4o-mini"),
        kinds.kind_for(JudgeSettings(model="openai/gpt-4o-mini", mode="batch")).name]
print(json.dumps({"told": told, "litellm": "litellm" in sys.modules}))
"""


def test_the_registry_and_the_catalog_tell_identities_without_importing_litellm() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["told"][1] == ["openai/gpt-4o-mini", PROMPT_VERSION]
    assert seen["told"][4] == "batch"
    assert seen["litellm"] is False
