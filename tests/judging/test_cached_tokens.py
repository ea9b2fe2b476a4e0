"""Cached prompt tokens billed truthfully: read from each reply (real HTTP through litellm to the fake
server, which reports them by OpenAI's prefix rule), shared over the items, priced at the model card's
cached price, carried through the result store and the batch ledger, and 0 in what a store hit bills."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest

from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.port import ClaimVerdict, Usage
from faithfulness_pipeline.judging.llm.batch.lines import Pending, deserialise, serialise
from faithfulness_pipeline.judging.llm.card import ModelCard, model_card
from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
from faithfulness_pipeline.judging.llm.part_settings import CardSettings
from faithfulness_pipeline.judging.llm.plans import share_usage
from faithfulness_pipeline.judging.llm.prompts import EXTRACT_SYSTEM, VERDICT_SYSTEM
from faithfulness_pipeline.judging.llm.replies import cached_prompt_tokens
from faithfulness_pipeline.judging.stack import JudgeStack
from faithfulness_pipeline.judging.store.codec import decode_claims, decode_verdicts, encode_claims, encode_verdicts
from faithfulness_pipeline.judging.store.open import open_store
from faithfulness_pipeline.judging.store.rows import decode_rows, encode_rows
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.fakellm.tokens import (
    PROMPT_CACHE_MIN_TOKENS,
    PROMPT_CACHE_STEP_TOKENS,
    prompt_token_ids,
)
from faithfulness_pipeline.testing.scripted import ScriptedJudge, typical_rows

KEY_ENV = "FP_TEST_CACHED_KEY"
#: A priced card with a cached price a quarter of the input price (gpt-4o-mini's ratio is a half).
PRICES = {"input_cost_per_token": 1e-6, "output_cost_per_token": 4e-6, "cached_input_cost_per_token": 2.5e-7}


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-cached")


def _frame(n: int, seed: int = 5) -> pl.DataFrame:
    rows = typical_rows(n, seed=seed)
    return pl.DataFrame({
        "conversation_id": [f"c{k:04d}" for k in range(n)],
        "input": [r.question for r in rows],
        "output": [r.answer for r in rows],
        "context": [list(r.context) for r in rows],
    })


def _judge(server: FakeLLMServer, store: Path | None = None, **settings: Any) -> JudgeStack:
    inner = LiteLLMJudge(JudgeSettings(model="openai/fake-judge", api_base=server.base_url, api_key_env=KEY_ENV,
                                       timeout_s=5, backoff_base_s=0.01, backoff_max_s=0.05, **settings))
    return JudgeStack(inner, None if store is None else open_store(store))


def _score(frame: pl.DataFrame, judge: JudgeStack) -> pl.DataFrame:
    return score_frame(frame, judge, ScoringConfig(chunk_rows=1000))  # closes the judge


def _totals(scored: pl.DataFrame) -> dict[str, Any]:
    return scored.select(pl.col(
        "billed_prompt_tokens", "billed_cached_prompt_tokens", "billed_completion_tokens", "billed_cost_usd",
        "cached_prompt_tokens", "cost_usd",
    ).sum()).row(0, named=True)


# ------------------------------------------------------------------------------------- the fake server


def _messages(system: str, user: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _shared(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _ask(server: FakeLLMServer, messages: list[dict[str, Any]]) -> Any:
    from faithfulness_pipeline.judging.llm.card import import_litellm

    litellm = import_litellm()

    async def main() -> Any:
        try:
            return await litellm.acompletion(model="openai/fake", api_base=server.base_url, api_key="k",
                                             messages=messages, max_tokens=20)
        finally:
            await litellm.close_litellm_async_clients()

    return asyncio.run(main())


def test_the_fake_server_reports_a_shared_prefix_of_1024_tokens_or_more_in_steps_of_128() -> None:
    long_rules = " ".join(f"Rule {k}: judge claim number {k} only by its passages." for k in range(120))
    first, second = _messages(long_rules, "First question?"), _messages(long_rules, "Another, different question?")
    short = _messages("Short rules.", "First question?")
    shared = _shared(prompt_token_ids(first), prompt_token_ids(second))
    assert shared >= PROMPT_CACHE_MIN_TOKENS + PROMPT_CACHE_STEP_TOKENS // 2  # the rule rounds down, visibly
    with FakeLLMServer(prompt_cache=True) as server:
        usages = [_ask(server, m).usage for m in (first, second, short, short)]
        stats = server.stats()
    cached = [cached_prompt_tokens(u, u.prompt_tokens) for u in usages]
    assert cached == [0, shared // PROMPT_CACHE_STEP_TOKENS * PROMPT_CACHE_STEP_TOKENS, 0, 0]  # short: < 1024
    assert [u.prompt_tokens for u in usages[:2]] == [len(prompt_token_ids(first)), len(prompt_token_ids(second))]
    assert stats.billed_cached_prompt_tokens == sum(cached)
    with FakeLLMServer() as plain:  # off by default: no cached tokens, no details
        usage = _ask(plain, first).usage
        usage = _ask(plain, first).usage
    assert cached_prompt_tokens(usage, usage.prompt_tokens) == 0 and not getattr(usage, "prompt_tokens_details", None)


def test_every_pack_of_a_step_starts_with_the_same_instruction_message() -> None:
    # The same first message, byte for byte, in every request of a step is what lets a provider's automatic
    # prefix cache serve it: no id, count or date of a pack may be in it.
    with FakeLLMServer(ScriptedJudge(), capture=True) as server:
        _score(_frame(40), _judge(server, max_items_per_pack=4))
        requests = list(server.requests_log)
    firsts = [json.dumps(r.messages[0], sort_keys=True) for r in requests]
    by_system: dict[str, int] = {}
    for r in requests:
        by_system[r.messages[0]["content"]] = by_system.get(r.messages[0]["content"], 0) + 1
    assert set(by_system) == {EXTRACT_SYSTEM, VERDICT_SYSTEM}
    assert min(by_system.values()) >= 3  # several packs of each step
    assert len(set(firsts)) == 2 and all(r.messages[0]["role"] == "system" for r in requests)
    assert len({r.messages[1]["content"] for r in requests}) == len(requests)  # the packs do differ


# ------------------------------------------------------------------------------------------ billing


def test_cached_tokens_are_billed_at_the_cached_price_and_a_store_hit_bills_none(tmp_path: Path) -> None:
    frame, store = _frame(40), tmp_path / "r.sqlite"
    with FakeLLMServer(ScriptedJudge(), prompt_cache=True) as server:
        cold = _score(frame, _judge(server, **PRICES))  # fills the provider's prompt cache, not the store
        server.reset_stats()
        judge = _judge(server, store, **PRICES)
        warm = _score(frame, judge)  # the very same requests again: served from the prompt cache
        sent = server.stats()
        again = _score(frame, _judge(server, store, **PRICES))  # all from the result store
    first, second, third = _totals(cold), _totals(warm), _totals(again)
    assert first["billed_cached_prompt_tokens"] == 0  # no request shares 1,024 tokens with an earlier one
    assert second["billed_prompt_tokens"] == first["billed_prompt_tokens"] == sent.billed_prompt_tokens
    assert second["billed_cached_prompt_tokens"] == sent.billed_cached_prompt_tokens > 0
    assert second["billed_cached_prompt_tokens"] == judge.stats().cached_prompt_tokens
    assert second["billed_cached_prompt_tokens"] > 0.9 * second["billed_prompt_tokens"]
    # what the card says, request by request and row by row
    bill = ((sent.billed_prompt_tokens - sent.billed_cached_prompt_tokens) * 1e-6
            + sent.billed_cached_prompt_tokens * 2.5e-7 + sent.billed_completion_tokens * 4e-6)
    assert math.isclose(second["billed_cost_usd"], bill, rel_tol=1e-9)
    uncached = sent.billed_prompt_tokens * 1e-6 + sent.billed_completion_tokens * 4e-6
    assert math.isclose(first["billed_cost_usd"], uncached, rel_tol=1e-9) and second["billed_cost_usd"] < uncached
    rows = warm.filter(pl.col(S.RESULT_SOURCE) == "llm")
    assert (rows.get_column("billed_cached_prompt_tokens") <= rows.get_column("billed_prompt_tokens")).all()
    # a store hit pays nothing, cached or not, but says what producing its result cost
    assert (third["billed_prompt_tokens"], third["billed_cached_prompt_tokens"], third["billed_cost_usd"]) == (0, 0, 0)
    assert set(again.get_column(S.RESULT_SOURCE)) == {"store"}
    assert third["cached_prompt_tokens"] == second["cached_prompt_tokens"] == second["billed_cached_prompt_tokens"]
    assert math.isclose(third["cost_usd"], second["cost_usd"], rel_tol=1e-9)
    assert warm.schema["billed_cached_prompt_tokens"] == pl.Int64 == warm.schema["cached_prompt_tokens"]


def test_cached_shares_add_up_and_never_exceed_an_items_prompt_share() -> None:
    card = ModelCard(8192, 1024, True, 1e-6, 4e-6, cached_input_cost_per_token=1e-7)
    for prompt, cached, sizes in ((1000, 999, [1, 2, 997]), (5, 4, [1, 1, 1]), (3000, 3000, [7, 11, 13]),
                                  (2049, 1024, [300, 1, 1200, 548])):
        plan = SimpleNamespace(entries=[SimpleNamespace(prompt_tokens=s) for s in sizes],
                               usage=[Usage() for _ in sizes])
        indices = list(range(len(sizes)))
        priced = share_usage(plan, indices, prompt, 50, None, {}, card.cost, cached)  # type: ignore[arg-type]
        assert sum(u.cached_prompt_tokens for u in plan.usage) == cached
        assert all(0 <= u.cached_prompt_tokens <= u.prompt_tokens for u in plan.usage)
        assert priced is not None
        total = (prompt - cached) * 1e-6 + cached * 1e-7 + 50 * 4e-6
        assert math.isclose(sum(priced), total) and math.isclose(sum(u.cost_usd or 0 for u in plan.usage), total)


# ------------------------------------------------------------------------------------------- prices


def test_the_card_takes_litellms_cached_prices_and_never_makes_one_up() -> None:
    mini = model_card(CardSettings.of(JudgeSettings(model="gpt-4o-mini")), "gpt-4o-mini")
    assert mini.cached_input_cost_per_token == 7.5e-8 and mini.input_cost_per_token == 1.5e-7
    assert mini.for_batches().cached_input_cost_per_token is None  # litellm names no batch cached price
    # ... so a batch's cached tokens cost what its other prompt tokens do
    assert mini.for_batches().cost(1000, 0, 600) == mini.for_batches().cost(1000, 0, 0)
    five = model_card(CardSettings.of(JudgeSettings(model="gpt-5-mini")), "gpt-5-mini")
    assert five.for_batches().cached_input_cost_per_token == 1.25e-8
    # a hand-set input price is not mixed with litellm's cached one: unknown, so the input price
    hand_set = JudgeSettings(model="gpt-4o-mini", input_cost_per_token=1e-6, output_cost_per_token=2e-6)
    hand = model_card(CardSettings.of(hand_set), "gpt-4o-mini")
    assert hand.cached_input_cost_per_token is None and hand.cost(1000, 10, 800) == hand.cost(1000, 10, 0)
    set_too = model_card(CardSettings.of(JudgeSettings(model="gpt-4o-mini", **PRICES)), "gpt-4o-mini")
    cost = set_too.cost(1000, 10, 800)
    assert cost is not None and math.isclose(cost[0], 200 * 1e-6 + 800 * 2.5e-7)
    assert set_too.for_batches().cost(1000, 10, 800) == cost  # hand-set prices hold in either mode
    unknown = ModelCard(8192, 1024, True, None, None)
    assert unknown.cost(1000, 10, 800) is None


def test_cached_counts_that_cannot_be_are_not_believed() -> None:
    assert cached_prompt_tokens({"prompt_tokens_details": {"cached_tokens": 256}}, 1000) == 256
    assert cached_prompt_tokens({"prompt_tokens_details": {"cached_tokens": 2000}}, 1000) == 0
    assert cached_prompt_tokens({"prompt_tokens_details": None}, 1000) == 0
    assert cached_prompt_tokens(SimpleNamespace(prompt_tokens_details=SimpleNamespace(cached_tokens=-5)), 10) == 0
    assert cached_prompt_tokens(None, 10) == 0


# ------------------------------------------------------------------------------ stored values, old and new


def test_stored_step_results_round_trip_cached_tokens_and_old_ones_read_as_none_cached() -> None:
    usage = Usage(0.5, 1200, 30, 0.001, 1024)
    assert decode_claims(encode_claims(("a", "b"), usage)) == (("a", "b"), usage)
    verdicts = (ClaimVerdict("supported", False, None, 0), ClaimVerdict("unsupported", True, "why", None))
    assert decode_verdicts(encode_verdicts(verdicts, usage, True)) == (verdicts, usage, True)
    plain = Usage(0.5, 1200, 30, 0.001)
    assert encode_claims(("a",), plain) == '[0.5,1200,30,0.001,"a"]'  # without cached tokens: the old layout
    # values written before cached tokens were counted
    assert decode_claims('[0.5,1200,30,0.001,"a","b"]') == (("a", "b"), plain)
    assert decode_verdicts('[0.5,1200,30,null,0,"S",0,0,null]')[1] == Usage(0.5, 1200, 30, None, 0)


def test_stored_rows_round_trip_cached_tokens_and_old_rows_still_load() -> None:
    usage = {f"{p}_{n}": [v] for p in ("x", "v") for n, v in zip(
        S.USAGE_COLUMNS, (0.5, 1300, 20, 0.002, 1152), strict=True)}
    results = pl.DataFrame({
        "claims": [["c1"]], "verdicts": [[{"verdict": "supported", "speculative": False, "reason": None,
                                          "evidence_index": 0}]],
        "context_truncated": [False], **usage,
    }, schema_overrides={"verdicts": pl.List(S.RAW_VERDICT_STRUCT)})
    value = encode_rows(results).to_list()[0]
    decoded = decode_rows([value.encode()])
    assert decoded is not None and decoded.get_column("verdicts").null_count() == 0
    assert decoded.select("x_cached_prompt_tokens", "v_cached_prompt_tokens").row(0) == (1152, 1152)
    # a row entry from before cached tokens: four usage numbers each
    old = value.replace(',"1152"]', "]")
    assert old != value and old.count('"1152"') == 0
    decoded = decode_rows([old.encode()])
    assert decoded is not None and decoded.get_column("verdicts").null_count() == 0
    assert decoded.select("x_cached_prompt_tokens", "v_prompt_tokens", "v_cost_usd").row(0) == (0, 1300, 0.002)


def test_the_batch_ledger_keeps_cached_tokens_and_reads_old_lines() -> None:
    from faithfulness_pipeline.core.port import ExtractItem

    spent = Usage(1.0, 2048, 40, 0.003, 1024)
    line = serialise(b"\x01", Pending(ExtractItem("r1", "An answer."), tries=1, sent=1, spent=spent))
    assert deserialise("extract", line).spent == spent
    line["spent"] = [1.0, 2048, 40, 0.003]  # written before cached tokens were counted
    assert deserialise("extract", line).spent == Usage(1.0, 2048, 40, 0.003, 0)


# -------------------------------------------------------------------------------------------- batches


def test_a_batch_bills_cached_tokens_at_the_batch_cached_price(tmp_path: Path) -> None:
    from faithfulness_pipeline.judging.factory import make_judge
    from faithfulness_pipeline.testing.fakellm.faults import BatchTiming

    model = "openai/gpt-5-mini"  # litellm prices its cached tokens in batches too
    card = model_card(CardSettings.of(JudgeSettings(model=model)), model).for_batches()
    assert card.input_cost_per_token and card.output_cost_per_token and card.cached_input_cost_per_token
    fast = BatchTiming(validating_s=0.01, per_line_s=0.001, finalizing_s=0.01, cancelling_s=0.01)
    settings = JudgeSettings(model=model, api_base="http://127.0.0.1:1/v1", api_key_env=KEY_ENV, timeout_s=5,
                             mode="batch", batch_poll_s=0.02)
    frame = _frame(30)
    with FakeLLMServer(ScriptedJudge(), prompt_cache=True, batch_timing=fast) as server:
        settings = settings.model_copy(update={"api_base": server.base_url})
        # two stores (batch mode needs one), so that the second run sends every line again
        cold = _score(frame, make_judge(settings.model_copy(update={"store": str(tmp_path / "a.sqlite")})))
        server.reset_stats()
        warm = _score(frame, make_judge(settings.model_copy(update={"store": str(tmp_path / "b.sqlite")})))
        sent = server.stats()
    assert _totals(cold)["billed_cached_prompt_tokens"] == 0
    totals = _totals(warm)
    assert totals["billed_prompt_tokens"] == sent.batch_billed_prompt_tokens
    assert totals["billed_cached_prompt_tokens"] == sent.batch_billed_cached_prompt_tokens > 0
    bill = ((sent.batch_billed_prompt_tokens - sent.batch_billed_cached_prompt_tokens) * card.input_cost_per_token
            + sent.batch_billed_cached_prompt_tokens * card.cached_input_cost_per_token
            + sent.batch_billed_completion_tokens * card.output_cost_per_token)
    assert math.isclose(totals["billed_cost_usd"], bill, rel_tol=1e-9)


def test_the_daily_aggregates_sum_cached_tokens_and_older_tables_count_none() -> None:
    import datetime as dt

    from faithfulness_pipeline.core.aggregates import daily_aggregates

    day = {"day": [dt.date(2026, 12, 1)] * 2, "model": ["m", "m"], "status": ["ok", "ok"],
           "hallucination_score": [0.0, 1.0], "faithfulness_score": [1.0, 0.0], "n_claims": [1, 1],
           "n_supported": [1, 0], "n_contradicted": [0, 1], "n_unsupported": [0, 0], "n_speculative": [0, 0],
           "llm_calls": [0.5, 0.5], "prompt_tokens": [1500, 1300], "completion_tokens": [5, 5],
           "cost_usd": [0.1, 0.1], "result_source": ["llm", "store"], "billed_llm_calls": [0.5, 0.0],
           "billed_prompt_tokens": [1500, 0], "billed_completion_tokens": [5, 0], "billed_cost_usd": [0.1, 0.0]}
    now = daily_aggregates(pl.DataFrame({**day, "cached_prompt_tokens": [1024, 1152],
                                         "billed_cached_prompt_tokens": [1024, 0]})).row(0, named=True)
    assert (now["cached_prompt_tokens"], now["billed_cached_prompt_tokens"]) == (2176, 1024)
    before = daily_aggregates(pl.DataFrame(day)).row(0, named=True)
    assert (before["cached_prompt_tokens"], before["billed_cached_prompt_tokens"]) == (0, 0)
    assert before["billed_prompt_tokens"] == 1500
