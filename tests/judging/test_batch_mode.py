"""Batch mode against the fake server's Files and Batches endpoints (real HTTP through litellm): the same
results as the interactive judge at the batch price, one store for both modes, and every failure mode of
a batch (line errors, unusable replies, expiry, failed validation, cancellation, a wait that runs out)
ending with every row present, nothing paid twice and the bill equal to the server's own count."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest

from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.port import Judge
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.judging.llm.batch.judge import BatchFailed
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer, FaultPlan
from faithfulness_pipeline.testing.fakellm.faults import BatchFaults, BatchTiming
from faithfulness_pipeline.testing.scripted import ScriptedJudge, typical_frame

KEY_ENV = "FP_TEST_BATCH_KEY"
#: A model litellm prices in both modes (interactive 1.5e-7 / 6e-7, batch 7.5e-8 / 3e-7 per token).
MODEL = "openai/gpt-4o-mini"
BATCH_PRICES = (7.5e-8, 3e-7)
INTERACTIVE_PRICES = (1.5e-7, 6e-7)
#: What may differ between two runs of the same rows: when, where results came from, what was paid, and
#: the usage shares (requests are packed differently).
RUN_ONLY = (*S.RUN_COLUMNS, *S.USAGE_COLUMNS)
FAST = BatchTiming(validating_s=0.01, per_line_s=0.001, finalizing_s=0.01, cancelling_s=0.01)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-batch")


def _frame(n: int = 30, seed: int = 5) -> pl.DataFrame:
    return typical_frame(n, seed=seed, ids="c{:04d}")


def _settings(server: FakeLLMServer, store: Path | str | None, **extra: Any) -> JudgeSettings:
    values: dict[str, Any] = {
        "model": MODEL, "api_base": server.base_url, "api_key_env": KEY_ENV, "timeout_s": 5,
        "backoff_base_s": 0.01, "backoff_max_s": 0.05, "batch_poll_s": 0.02, "mode": "batch",
        "store": None if store is None else str(store), "max_items_per_pack": 4,
    }
    values.update(extra)
    return JudgeSettings(**values)


def _score(frame: pl.DataFrame, judge: Judge, chunk_rows: int = 7) -> pl.DataFrame:
    return score_frame(frame, judge, ScoringConfig(chunk_rows=chunk_rows))  # closes the judge


def _results(df: pl.DataFrame) -> pl.DataFrame:
    return df.drop(RUN_ONLY).sort(S.ROW_KEY)


def _assert_bill_matches_server(scored: pl.DataFrame, server: FakeLLMServer, prices: tuple[float, float]) -> None:
    st = server.stats()
    prompt, completion = st.batch_billed_prompt_tokens, st.batch_billed_completion_tokens
    assert prompt > 0 and completion > 0
    assert int(scored.get_column("billed_prompt_tokens").sum()) == prompt
    assert int(scored.get_column("billed_completion_tokens").sum()) == completion
    expected = prompt * prices[0] + completion * prices[1]
    assert math.isclose(float(scored.get_column("billed_cost_usd").sum()), expected, rel_tol=1e-9)


def test_batch_mode_gives_the_interactive_results_at_half_the_price(new_store: Callable[[str], str]) -> None:
    frame = _frame()
    with FakeLLMServer(ScriptedJudge(), batch_timing=FAST) as server:
        interactive = _score(frame, make_judge(_settings(server, new_store("i"), mode="interactive")))
        chat = server.stats()
        server.reset_stats()
        batch = _score(frame, make_judge(_settings(server, new_store("b"))))
        st = server.stats()
    assert st.requests == 0, "batch mode sent chat requests"
    assert st.batches_created == 2  # extraction, then verdicts
    assert _results(batch).equals(_results(interactive))
    assert set(batch.get_column(S.RESULT_SOURCE)) == {"llm"}
    assert (batch.get_column("status") == "ok").all()
    _assert_bill_matches_server(batch, server, BATCH_PRICES)
    # The same requests cost twice as much interactively (same prompts; packing differs a little).
    interactive_cost = chat.billed_prompt_tokens * INTERACTIVE_PRICES[0] + chat.billed_completion_tokens * INTERACTIVE_PRICES[1]
    assert math.isclose(float(interactive.get_column("billed_cost_usd").sum()), interactive_cost, rel_tol=1e-9)
    batch_at_interactive = st.batch_billed_prompt_tokens * INTERACTIVE_PRICES[0] + st.batch_billed_completion_tokens * INTERACTIVE_PRICES[1]
    assert math.isclose(float(batch.get_column("billed_cost_usd").sum()), batch_at_interactive / 2, rel_tol=1e-9)
    # cost_usd (what producing a result cost) is priced the same way as the bill.
    assert math.isclose(float(batch.get_column("cost_usd").sum()), float(batch.get_column("billed_cost_usd").sum()))


def test_one_store_serves_both_modes_and_a_batch_run_pays_only_for_what_it_lacks(
    new_store: Callable[[str], str],
) -> None:
    frame = _frame(24)
    store = new_store("shared")
    script = ScriptedJudge()
    with FakeLLMServer(script, batch_timing=FAST) as server:
        first_half = _score(frame.head(12), make_judge(_settings(server, store, mode="interactive")))
        assert server.stats().requests > 0
        server.reset_stats()
        script.calls.clear()
        whole = _score(frame, make_judge(_settings(server, store)))
        asked = {text for call in script.calls if call.step == "extract" for text in call.texts}
        assert asked and not asked & set(frame.head(12).get_column("output"))  # the stored half is not asked
        assert whole.filter(pl.col(S.ROW_KEY).is_in(first_half.get_column(S.ROW_KEY).implode())).get_column(
            S.RESULT_SOURCE).unique().to_list() == ["store"]
        assert (whole.get_column("status") == "ok").all()
        _assert_bill_matches_server(whole, server, BATCH_PRICES)
        server.reset_stats()
        again = _score(frame, make_judge(_settings(server, store, mode="interactive")))
        assert server.stats().requests == 0 and server.stats().batches_created == 0
    assert set(again.get_column(S.RESULT_SOURCE)) == {"store"}
    assert _results(again).equals(_results(whole))


@pytest.mark.parametrize("faults", [
    BatchFaults(line_faults=FaultPlan(rate_5xx=0.2, rate_429=0.1, rate_malformed=0.1, rate_partial=0.05)),
    BatchFaults(expire_after={1: 2}),
], ids=["failed and unusable lines", "expired with partial output"])
def test_failed_lines_are_asked_again_in_follow_up_batches_and_no_row_is_lost(tmp_path: Path,
                                                                              faults: BatchFaults) -> None:
    frame = _frame()
    with FakeLLMServer(ScriptedJudge(), batch_timing=FAST) as server:
        clean = _score(frame, make_judge(_settings(server, tmp_path / "clean.sqlite")))
        server.reset_stats()
        server.set_batch_faults(faults)
        faulty = _score(frame, make_judge(_settings(server, tmp_path / "faulty.sqlite", max_retries=10)))
        st = server.stats()
    assert st.batches_created > 2, "nothing was asked again"
    assert faulty.height == frame.height and (faulty.get_column("status") == "ok").all()
    assert _results(faulty).equals(_results(clean))
    _assert_bill_matches_server(faulty, server, BATCH_PRICES)


def test_lines_that_fail_every_try_become_error_rows_billed_what_they_cost(tmp_path: Path) -> None:
    frame = _frame(12)
    faults = BatchFaults(line_faults=FaultPlan(rate_malformed=1.0))
    with FakeLLMServer(ScriptedJudge(), batch_timing=FAST, batch_faults=faults) as server:
        scored = _score(frame, make_judge(_settings(server, tmp_path / "s.sqlite", max_retries=1)))
    assert scored.height == 12 and (scored.get_column("status") == "error").all()
    assert scored.get_column("error").str.contains("gave up after 2 batch requests").all()
    assert scored.get_column("hallucination_score").is_null().all()
    _assert_bill_matches_server(scored, server, BATCH_PRICES)


def test_interactive_fallback_asks_failed_lines_one_by_one(tmp_path: Path) -> None:
    frame = _frame(12)
    faults = BatchFaults(line_faults=FaultPlan(rate_5xx=1.0))
    with FakeLLMServer(ScriptedJudge(), batch_timing=FAST, batch_faults=faults) as server:
        scored = _score(frame, make_judge(_settings(server, tmp_path / "s.sqlite", batch_fallback="interactive")))
        st = server.stats()
    assert (scored.get_column("status") == "ok").all()
    # No follow-up batch: the chat endpoint got the failed lines' items, and the verdicts of the claims it
    # extracted still went as a batch.
    assert st.requests > 0 and st.batches_created == 2


def test_a_batch_that_fails_validation_stops_the_run_naming_it(tmp_path: Path) -> None:
    faults = BatchFaults(fail_validation={1})
    with (FakeLLMServer(ScriptedJudge(), batch_timing=FAST, batch_faults=faults) as server,
          pytest.raises(BatchFailed, match=r"batch_\w+ \(extract\) failed validation")):
        _score(_frame(8), make_judge(_settings(server, tmp_path / "s.sqlite")))


def test_a_cancelled_batch_stops_the_run_and_keeps_what_it_finished(new_store: Callable[[str], str]) -> None:
    store = new_store("s")
    frame = _frame(20)
    script = ScriptedJudge()
    with FakeLLMServer(script, batch_timing=FAST, batch_faults=BatchFaults(stall_after={1: 2})) as server:
        cancel = threading.Thread(target=_cancel_first_batch, args=(server,), daemon=True)
        cancel.start()
        with pytest.raises(BatchFailed, match=r"batch_\w+ \(extract\) was cancelled at the provider; its 8 finished"):
            _score(frame, make_judge(_settings(server, store)))
        cancel.join()
        finished = _items_asked(script, "extract")
        server.set_batch_faults(BatchFaults())
        script.calls.clear()
        resumed = _score(frame, make_judge(_settings(server, store)))
    # The two lines (8 answers) answered before the cancel are not asked again.
    assert _items_asked(script, "extract") == 20 - 8 and finished >= 8
    assert (resumed.get_column("status") == "ok").all()


def _items_asked(script: ScriptedJudge, step: str) -> int:
    return sum(len(call.texts) for call in script.calls if call.step == step)


def _cancel_first_batch(server: FakeLLMServer) -> None:
    deadline = time.monotonic() + 20
    with httpx.Client(base_url=server.base_url, headers={"Authorization": "Bearer sk-batch"}) as client:
        while time.monotonic() < deadline:
            listed = client.get("/batches").json().get("data", [])
            running = [b for b in listed if b["request_counts"]["completed"] >= 2]
            if running:
                client.post(f"/batches/{running[0]['id']}/cancel")
                return
            time.sleep(0.01)


def test_a_run_out_of_wait_stops_and_the_next_run_picks_its_batches_up(new_store: Callable[[str], str]) -> None:
    store = new_store("s")
    frame = _frame(12)
    slow = BatchTiming(validating_s=1.5, per_line_s=0.001, finalizing_s=0.01)
    with FakeLLMServer(ScriptedJudge(), batch_timing=slow) as server:
        with pytest.raises(BatchFailed, match=r"still running after 0.3 s \(batch_\w+\).*run again"):
            _score(frame, make_judge(_settings(server, store, batch_max_wait_s=0.3)))
        assert server.stats().batches_created == 1
        scored = _score(frame, make_judge(_settings(server, store)))
        st = server.stats()
    assert st.batches_created == 2, "the extraction batch was submitted again"
    assert (scored.get_column("status") == "ok").all()
    # The run that picked the batch up is the one that ingested it: it is billed for it.
    _assert_bill_matches_server(scored, server, BATCH_PRICES)


def test_batch_mode_needs_a_store_and_a_model(tmp_path: Path) -> None:
    from faithfulness_pipeline.core.errors import ConfigError

    with (FakeLLMServer(ScriptedJudge()) as server,
          pytest.raises(ConfigError, match="batch mode needs a result store")):
        make_judge(_settings(server, None))
    with pytest.raises(ConfigError, match="batch mode needs a model"):
        make_judge(JudgeSettings(mode="batch", store=str(tmp_path / "s.sqlite")))


def test_batch_mode_refuses_a_store_it_cannot_keep_batch_records_in(tmp_path: Path) -> None:
    """A store of the user's own (any object with the store's methods) keeps results, not batch records."""
    from faithfulness_pipeline.core.errors import ConfigError
    from faithfulness_pipeline.judging.llm.batch.judge import BatchJudge
    from faithfulness_pipeline.judging.store.open import open_store

    class OwnStore:
        def __init__(self) -> None:
            self.inner = open_store(tmp_path / "s.sqlite")
            self.location = "own-store"

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    with FakeLLMServer(ScriptedJudge()) as server, pytest.raises(ConfigError, match="cannot keep its batch records in OwnStore"):
        BatchJudge(_settings(server, tmp_path / "s.sqlite"), OwnStore())


def test_batches_are_split_at_the_provider_limits(tmp_path: Path) -> None:
    from faithfulness_pipeline.judging.llm.batch.files import BatchLimits
    from faithfulness_pipeline.judging.llm.batch.judge import BatchJudge
    from faithfulness_pipeline.judging.stack import JudgeStack
    from faithfulness_pipeline.judging.store.open import open_store

    frame = _frame(24)
    with FakeLLMServer(ScriptedJudge(), batch_timing=FAST) as server:
        settings = _settings(server, tmp_path / "s.sqlite")
        store = open_store(tmp_path / "s.sqlite")
        batch = BatchJudge(settings, store, limits=BatchLimits(max_lines=2))
        judge = JudgeStack(batch, store, bulk=batch.prepay_step)
        scored = _score(frame, judge)
        st = server.stats()
    # 24 answers at 4 a request: 6 extraction lines -> 3 batches of 2; the verdict lines likewise.
    assert st.batches_created >= 6 and st.batch_lines <= 2 * st.batches_created
    assert (scored.get_column("status") == "ok").all()


def test_the_dry_run_shows_the_interactive_and_the_batch_cost_side_by_side(tmp_path: Path) -> None:
    import re

    from faithfulness_pipeline.judging.dryrun import estimate_cost
    from faithfulness_pipeline.sources.open import open_source

    src = tmp_path / "in.parquet"
    _frame(300).write_parquet(src)
    with FakeLLMServer(ScriptedJudge()) as server, open_source(src, rows=ScoringConfig().chunk_rows) as source:
        judge = make_judge(_settings(server, tmp_path / "s.sqlite"))
        report = estimate_cost(judge, source, ScoringConfig(), batch=True)
        asyncio.run(judge.aclose())
        assert server.stats().requests == 0 and server.stats().files_uploaded == 0
    found = dict(re.findall(r"estimated cost, (interactive|batch)[^$]*\$([\d.]+)", report))
    assert float(found["batch"]) == pytest.approx(float(found["interactive"]) / 2, rel=0.01), report
    assert re.search(r"batch \(--batch\): \$[\d.]+ +<- this run", report), report
