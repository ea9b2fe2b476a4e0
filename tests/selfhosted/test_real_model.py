"""The real-model tier: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, from its PyPI part packages) on llama.cpp's
prebuilt server, a model that really extracts and judges (``faithfulness_pipeline.testing.llama_cpp``).

A few rows in each language, with the judge's defaults and no flag: claims found, verdicts parsed, billed
tokens equal to the server's usage. And the verdict step without a grammar, where the model may answer a code
too few or too many: such a reply is an error or a retry, never a score (a missing verdict is never read as
support). What the model's verdicts are worth is measured by ``bench/judge_quality.py``, not asserted here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.core.port import VerdictItem, VerdictResult
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.llama_cpp import LlamaCppUnavailable, Server, serve
from faithfulness_pipeline.testing.recording_proxy import Recorder

pytestmark = [pytest.mark.llama_server, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
MODEL = "openai/qwen"
KEY_ENV = "FP_LLAMA_TEST_KEY"  # the server checks no key; litellm's openai provider wants one
SLOTS = 2
#: Two answers of two or three sentences per language (en, zh-TW, zh-CN, ko), each with its context.
ROWS = ["flat-000", "flat-002", "flat-007", "flat-010", "flat-013", "flat-015"]
LANGUAGE = {"flat-000": "en", "flat-002": "en", "flat-007": "zh", "flat-010": "zh", "flat-013": "ko",
            "flat-015": "ko"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    try:
        with serve(model="qwen", context_size=8192, parallel=SLOTS, log_dir=tmp_path_factory.mktemp("qwen")) as up:
            yield up
    except LlamaCppUnavailable as why:
        pytest.fail(f"the real-model tier cannot run here: {why}")


@pytest.fixture
def recorder(server: Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    monkeypatch.setenv(KEY_ENV, "none")
    with Recorder(server.root) as proxy:
        yield proxy


def _settings(recorder: Recorder, **extra: object) -> JudgeSettings:
    # A CPU server answers slowly, and requests wait for a free slot: the one setting given besides the
    # endpoint is a timeout that fits it.
    return JudgeSettings(model=MODEL, api_base=recorder.base_url, api_key_env=KEY_ENV, timeout_s=600,
                         max_concurrency=SLOTS, **extra)  # type: ignore[arg-type]


def test_a_real_model_finds_claims_and_verdicts_in_every_language_billed_as_the_server_reports(
    recorder: Recorder,
) -> None:
    rows = pl.read_parquet(REPO / "sample_data" / "flat").filter(pl.col("conversation_id").is_in(ROWS))
    scored = score_frame(rows, make_judge(_settings(recorder)))
    assert scored.get_column("conversation_id").to_list() == rows.get_column("conversation_id").to_list()
    errors = scored.filter(pl.col("status") != "ok")
    assert (errors.get_column("error").str.len_chars() > 0).all()  # never an error without its reason
    ok = scored.filter(pl.col("status") == "ok")
    for row in ok.iter_rows(named=True):
        assert row["n_claims"] == len(row["claims"]) == len(row["verdicts"])  # one verdict per claim, parsed
    found = ok.filter(pl.col("n_claims") > 0).get_column("conversation_id").to_list()
    assert {LANGUAGE[key] for key in found} == {"en", "zh", "ko"}, scored.select("conversation_id", "claims", "error")
    calls = recorder.chat_calls()
    assert calls and all(c.status == 200 for c in calls)
    billed = (int(scored.get_column("billed_prompt_tokens").sum()), int(scored.get_column(
        "billed_completion_tokens").sum()))  # fmt: skip
    assert billed == (sum(c.prompt_tokens for c in calls), sum(c.completion_tokens for c in calls))


def test_without_a_grammar_a_wrong_number_of_verdicts_is_never_a_score(recorder: Recorder) -> None:
    """The prompt alone (``use_json_schema no``): nothing holds the model to one code per claim. Every item
    ends with exactly one verdict per claim or an error naming why; none is short of verdicts."""
    context = ("The Eiffel Tower is 330 metres tall.", "It was completed in 1889 for the World's Fair.")
    claims = ("The Eiffel Tower is 330 metres tall.", "The Eiffel Tower was completed in 1889.",
              "The Eiffel Tower is painted every seven years.", "The Eiffel Tower is in Berlin.")
    items = [VerdictItem(f"r{k}", claims[: 1 + k % 4], context) for k in range(8)]
    judge = LiteLLMJudge(_settings(recorder, use_json_schema="no", max_retries=1))

    async def main() -> list[VerdictResult]:
        try:
            return await judge.judge_claims(items)
        finally:
            await judge.aclose()

    results = asyncio.run(main())
    assert [r.id for r in results] == [i.id for i in items]
    for item, result in zip(items, results, strict=True):
        assert (result.verdicts is None) != (result.error is None)
        assert result.verdicts is None or len(result.verdicts) == len(item.claims), result
    assert [c.response_format for c in recorder.chat_calls()] == [None] * len(recorder.chat_calls())
