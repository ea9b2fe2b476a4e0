"""The packing study (``api.packing_study``, ``faithfulness-pipeline packing-study``): the same labelled rows
judged in every request shape, over real HTTP to the fake server, and a judge whose verdicts depend on their
position in a request, which the study must catch."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.api.packing_study import (
    SHAPES,
    extraction_by_pack_size,
    extraction_markdown,
    markdown,
    run_study,
    stratified,
)
from faithfulness_pipeline.core.calibration import CalibrationConfig
from faithfulness_pipeline.core.port import (
    ClaimVerdict,
    ExtractItem,
    ExtractResult,
    Hooks,
    JudgeStats,
    VerdictItem,
    VerdictResult,
)
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.reliability.support import child_env

REPO = Path(__file__).resolve().parents[2]
LABELLED = REPO / "sample_labelled"
KEY_ENV = "FP_TEST_STUDY_KEY"
CONFIG = CalibrationConfig(group_columns=("language",), bootstrap=200)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-fp-study-test")


def test_every_shape_judges_the_same_claims_and_a_deterministic_judge_flips_nothing() -> None:
    labelled = pl.read_parquet(LABELLED)
    with FakeLLMServer(ScriptedJudge(), capture=True) as srv:
        settings = JudgeSettings(model="openai/fake-judge", api_base=srv.base_url, api_key_env=KEY_ENV, timeout_s=5)
        result = asyncio.run(run_study(labelled, settings, make_judge, calibration=CONFIG))
        sent = len(srv.requests_log)
    rows = result.rows
    assert set(rows.get_column("judge").unique()) == set(SHAPES)
    per_shape = rows.group_by("judge").agg(pl.len(), pl.col("error").null_count().alias("ok"))
    assert per_shape.get_column("len").to_list() == [labelled.height] * len(SHAPES)
    assert per_shape.get_column("ok").to_list() == [labelled.height] * len(SHAPES)
    # The scripted responder reads every claim on its own: no shape, order or neighbour changes a verdict.
    flips = result.flips
    assert flips.get_column("claims").min() > 0  # type: ignore[operator]
    assert flips.get_column("verdict_flips").to_list() == [0] * flips.height
    # one answer per request in the single shape, far fewer packed: what the study is there to weigh
    costs = result.costs
    judged = int(rows.filter((pl.col("judge") == "single") & (pl.col("verdict_codes").list.len() > 0)).height)
    assert costs["single"].requests == judged
    assert costs["packed"].requests < costs["single"].requests
    assert costs["extract:single"].requests == labelled.height
    assert sent == sum(c.requests for c in costs.values())
    # agreement per shape overall and per language, all equal here; the differences from single are 0
    overall = result.calibration.filter(pl.col("group_by") == "all")
    assert overall.height == len(SHAPES) and overall.get_column("balanced_accuracy").n_unique() == 1
    assert set(result.calibration.filter(pl.col("group_by") == "language").get_column("group")) == {"en", "ko", "zh"}
    assert result.differences.get_column("balanced_accuracy_difference").to_list() == [0.0] * (len(SHAPES) - 1)
    text = markdown(result)
    assert all(f"| {shape} |" in text for shape in SHAPES)


def test_the_extraction_sweep_counts_claims_per_pack_size_and_what_each_size_sent() -> None:
    labelled = pl.read_parquet(LABELLED)
    with FakeLLMServer(ScriptedJudge()) as srv:
        settings = JudgeSettings(model="openai/fake-judge", api_base=srv.base_url, api_key_env=KEY_ENV, timeout_s=5)
        frame, costs = asyncio.run(extraction_by_pack_size(labelled, settings, make_judge, [1, 8]))
    assert frame.height == labelled.height
    # the scripted responder reads each answer alone: the pack size changes what is sent, not what is found
    assert frame.get_column("claims_1").to_list() == frame.get_column("claims_8").to_list()
    assert costs[1].requests == labelled.height and costs[8].requests == -(-labelled.height // 8)
    assert f"| 1 | {frame.get_column('claims_1').mean():.3f} | {labelled.height} of {labelled.height} |" in \
        extraction_markdown(frame, costs)


class _PositionalJudge:
    """A judge that reads the first item of every call as fully unsupported: a position effect."""

    model_name = "positional"
    prompt_version = "p1"

    def __init__(self, settings: JudgeSettings) -> None:
        self.per_call = settings.max_items_per_pack
        self.requests = 0

    async def extract_claims(self, items: Sequence[ExtractItem],
                             hooks: Hooks[ExtractResult] | None = None) -> list[ExtractResult]:
        self.requests += -(-len(items) // self.per_call)
        return [ExtractResult(it.id, tuple(s for s in it.answer.split(". ") if s)) for it in items]

    async def judge_claims(self, items: Sequence[VerdictItem],
                           hooks: Hooks[VerdictResult] | None = None) -> list[VerdictResult]:
        out = []
        for position, item in enumerate(items):
            self.requests += position % self.per_call == 0
            verdict = "unsupported" if position % self.per_call == 0 else "supported"
            out.append(VerdictResult(item.id, tuple(ClaimVerdict(verdict, reason="r") for _ in item.claims)))
        return out

    def stats(self) -> JudgeStats:
        return JudgeStats(requests=self.requests)


def test_a_judge_whose_verdicts_depend_on_position_shows_flips_between_shapes() -> None:
    labelled = pl.read_parquet(LABELLED)
    settings = JudgeSettings(model="openai/positional", max_items_per_pack=8)
    result = asyncio.run(run_study(labelled, settings, _PositionalJudge, calibration=CONFIG))
    flips = {r["shapes"]: r for r in result.flips.iter_rows(named=True)}
    # one answer a request: every item is a call's first, all unsupported; packed: only every eighth
    assert flips["single vs packed"]["verdict_flips"] > 0
    assert flips["packed vs shuffled"]["verdict_flips"] > 0  # other positions, other verdicts
    assert flips["packed vs repeat"]["verdict_flips"] == 0  # the same order again: no noise of its own
    assert result.costs["single"].requests > result.costs["packed"].requests


def test_stratified_takes_languages_evenly_and_keeps_every_row_when_asked_for_more() -> None:
    labelled = pl.read_parquet(LABELLED)
    assert stratified(labelled, 100).equals(labelled)
    part = stratified(labelled, 12)
    assert part.height == 12 and part.group_by("language").len().get_column("len").to_list() == [4, 4, 4]
    assert stratified(labelled, 12).equals(part)  # seeded: the same rows every time


def test_the_command_runs_against_an_endpoint_and_prints_every_shape(tmp_path: Path) -> None:
    """docs/judges.md's study, run as a user would: the fake server in front, the command behind it."""
    out = tmp_path / "study.parquet"
    command = [sys.executable, "-m", "faithfulness_pipeline.testing.fakellm", "--responder", "scripted", "--",
               sys.executable, "-m", "faithfulness_pipeline.cli", "packing-study", "--labelled", str(LABELLED),
               "--model", "openai/fake-judge", "--rows", "9", "--bootstrap", "100", "-o", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, env=child_env(), timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert all(f"| {shape} |" in done.stdout for shape in SHAPES)
    assert "packing-study: verdicts, shuffled" in done.stderr
    assert pl.read_parquet(out).height == 9 * len(SHAPES)


def test_the_command_refuses_the_offline_judge_and_names_the_flag(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "faithfulness_pipeline.cli", "packing-study", "--labelled",
                           str(LABELLED)], capture_output=True, text=True, env=child_env(), timeout=120, check=False)
    assert done.returncode == 2 and "--model" in done.stderr
