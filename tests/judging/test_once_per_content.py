"""Pay once per distinct content, and bill truthfully: identical items of one run are asked once (across
chunks, with and without a store), every row says where its result came from, and the billed columns add
up to what the judge sent and the fake server billed, with faults, retries and a partly warm store."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.port import ExtractItem, ExtractResult, VerdictItem
from faithfulness_pipeline.judging.dedup import RunMemory
from faithfulness_pipeline.judging.dryrun import estimate_items
from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
from faithfulness_pipeline.judging.llm.packing import rough_sentences
from faithfulness_pipeline.judging.stack import JudgeStack
from faithfulness_pipeline.judging.store.open import open_store
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer, FaultPlan
from faithfulness_pipeline.testing.scripted import ScriptedJudge, typical_rows

KEY_ENV = "FP_TEST_ONCE_KEY"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-once")


def _frame(n: int, distinct: int, seed: int = 3) -> pl.DataFrame:
    """``n`` rows repeating ``distinct`` contents in turn, under their own ids."""
    rows = typical_rows(distinct, seed=seed)
    return pl.DataFrame({
        "conversation_id": [f"c{k:04d}" for k in range(n)],
        "input": [rows[k % distinct].question for k in range(n)],
        "output": [rows[k % distinct].answer for k in range(n)],
        "context": [list(rows[k % distinct].context) for k in range(n)],
    })


def _judge(server: FakeLLMServer, store: Path | None = None, **settings: Any) -> JudgeStack:
    inner = LiteLLMJudge(JudgeSettings(model="openai/fake-judge", api_base=server.base_url, api_key_env=KEY_ENV,
                                       timeout_s=5, backoff_base_s=0.01, backoff_max_s=0.05, **settings))
    return JudgeStack(inner, None if store is None else open_store(store))


def _score(frame: pl.DataFrame, judge: JudgeStack, chunk_rows: int = 7) -> pl.DataFrame:
    return score_frame(frame, judge, ScoringConfig(chunk_rows=chunk_rows))  # closes the judge


def _items_asked(script: ScriptedJudge, step: str) -> int:
    return sum(len(call.texts) for call in script.calls if call.step == step)


@pytest.mark.parametrize("with_store", [False, True], ids=["no store", "store"])
def test_identical_items_are_asked_once_across_chunks(tmp_path: Path, with_store: bool) -> None:
    frame = _frame(60, distinct=6)
    script = ScriptedJudge()
    store = tmp_path / "r.sqlite" if with_store else None
    with FakeLLMServer(script) as server:
        scored = _score(frame, _judge(server, store))
        sent = server.stats()
        if with_store:  # the next run finds every row whole in the store (the key holds the server's address)
            server.reset_stats()
            again = _score(frame, _judge(server, store))
            assert server.stats().requests == 0
            assert set(again.get_column(S.RESULT_SOURCE)) == {"store"}
            assert again.drop(S.RUN_COLUMNS).equals(scored.drop(S.RUN_COLUMNS))
    assert _items_asked(script, "extract") == 6 and _items_asked(script, "verdict") == 6
    # A row is "llm" when this run paid for one of its steps: the row that carried a content's extraction
    # and the one that carried its verdicts (chunks run side by side: not always the same row); the rest
    # are copies.
    sources = scored.get_column(S.RESULT_SOURCE)
    paid = scored.filter(pl.col("billed_llm_calls") > 0)
    assert set(sources) == {"llm", "duplicate"} and 6 <= paid.height <= 12
    assert set(paid.get_column(S.RESULT_SOURCE)) == {"llm"} and (sources == "llm").sum() == paid.height
    # every row has its content's result: the same as the first row of that content
    content = scored.drop(S.RUN_COLUMNS, "conversation_id", "row_key").with_columns(pl.int_range(60).mod(6).alias("k"))
    assert content.unique().height == 6
    # what this run paid adds up to what the server billed; copies paid nothing
    billed = scored.select(pl.col("billed_prompt_tokens").sum(), pl.col("billed_completion_tokens").sum()).row(0)
    assert billed == (sent.billed_prompt_tokens, sent.billed_completion_tokens)
    assert math.isclose(scored.get_column("billed_llm_calls").sum(), sent.requests)
    assert scored.filter(pl.col(S.RESULT_SOURCE) == "duplicate").get_column("billed_prompt_tokens").sum() == 0


def test_billed_columns_add_up_to_what_was_sent_with_faults_and_a_partly_warm_store(tmp_path: Path) -> None:
    frame = _frame(90, distinct=45, seed=8)  # every content twice
    store = tmp_path / "r.sqlite"
    prices = {"input_cost_per_token": 1e-6, "output_cost_per_token": 3e-6}
    with FakeLLMServer(ScriptedJudge()) as server:
        _score(frame.head(20), _judge(server, store, **prices))  # a third of the contents stored already
        server.reset_stats()
        server.set_faults(FaultPlan(rate_429=0.15, retry_after_s=0.01, rate_5xx=0.1, rate_malformed=0.1,
                                    rate_partial=0.1, seed=5))
        judge = _judge(server, store, **prices)
        scored = _score(frame, judge, chunk_rows=25)
        sent = server.stats()
    stats = judge.stats()
    assert sent.by_outcome.get("malformed", 0) + sent.by_outcome.get("partial", 0) > 0 and stats.retries > 0
    assert {"llm", "store", "duplicate"} <= set(scored.get_column(S.RESULT_SOURCE))
    totals = scored.select(pl.col("billed_prompt_tokens", "billed_completion_tokens", "billed_llm_calls",
                                  "billed_cost_usd").sum()).row(0, named=True)
    assert totals["billed_prompt_tokens"] == sent.billed_prompt_tokens == stats.prompt_tokens
    assert totals["billed_completion_tokens"] == sent.billed_completion_tokens == stats.completion_tokens
    assert math.isclose(totals["billed_llm_calls"], sent.requests) and sent.requests == stats.requests
    assert stats.cost_usd is not None and math.isclose(totals["billed_cost_usd"], stats.cost_usd, rel_tol=1e-9)
    # store hits and copies cost this run nothing, but say what producing them cost
    free = scored.filter(pl.col(S.RESULT_SOURCE).is_in(["store", "duplicate"]))
    assert free.get_column("billed_cost_usd").sum() == 0 and free.get_column("cost_usd").min() > 0


def test_the_dry_run_counts_each_content_once(tmp_path: Path) -> None:
    rows = typical_rows(12, seed=4)

    def estimate(repeat: int) -> tuple[int, int, int]:
        extract = [ExtractItem(f"r{k}", rows[k % 12].answer, rows[k % 12].question) for k in range(12 * repeat)]
        verdict = [VerdictItem(f"r{k}", tuple(rough_sentences(rows[k % 12].answer)), rows[k % 12].context)
                   for k in range(12 * repeat)]
        with FakeLLMServer(ScriptedJudge()) as server:
            got = estimate_items(_judge(server), extract, verdict)
            assert server.stats().requests == 0
        return got.requests, got.prompt_tokens, got.completion_tokens

    assert estimate(50) == estimate(1)


def test_concurrent_calls_wait_for_the_same_answer(tmp_path: Path) -> None:
    items = [ExtractItem("a", "The bridge opened in 1990."), ExtractItem("b", "The bridge opened in 1990.")]
    script = ScriptedJudge()
    with FakeLLMServer(script) as server:
        judge = _judge(server)

        async def both() -> list[list[ExtractResult]]:
            try:
                return list(await asyncio.gather(judge.extract_claims(items[:1]), judge.extract_claims(items[1:])))
            finally:
                await judge.aclose()

        first, second = asyncio.run(both())
    assert _items_asked(script, "extract") == 1
    assert first[0].claims == second[0].claims and {first[0].source, second[0].source} == {None, "duplicate"}
    assert judge.stats().duplicate_items == 1


def test_run_memory_forgets_the_oldest_beyond_its_capacity() -> None:
    memory: RunMemory[ExtractResult] = RunMemory(capacity=2)
    for n in range(3):
        memory.finish(bytes([n]), ExtractResult(str(n), ("c",)))
    assert memory.known(bytes([0])) is None and memory.known(bytes([2])) is not None
    memory.finish(b"x", ExtractResult("x", None, "failed"))
    assert memory.known(b"x") is None  # a failure is not served to later items
