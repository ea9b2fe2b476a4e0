"""The litellm judge against the fake OpenAI-compatible server, over real HTTP through litellm."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from faithfulness_pipeline.api import score_frame_async
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.port import (
    ExtractItem,
    ExtractResult,
    Hooks,
    Judge,
    JudgeStats,
    VerdictItem,
    VerdictResult,
)
from faithfulness_pipeline.judging.dryrun import estimate_items
from faithfulness_pipeline.judging.factory import make_judge as make_from_settings
from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
from faithfulness_pipeline.judging.llm.packing import rough_sentences
from faithfulness_pipeline.judging.llm.plans import NO_CONTEXT_REASON
from faithfulness_pipeline.judging.llm.prompts import PROMPT_VERSION
from faithfulness_pipeline.judging.llm.secrets import MissingAPIKeyError, Redactor
from faithfulness_pipeline.judging.stack import JudgeStack
from faithfulness_pipeline.judging.store.keys import KeyMaker
from faithfulness_pipeline.judging.store.open import open_store
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer, FaultPlan, Latency
from faithfulness_pipeline.testing.scripted import (
    ScriptedJudge,
    TypicalRow,
    script_claims,
    script_sentences,
    script_verdicts,
    typical_rows,
)

KEY_ENV = "FP_TEST_JUDGE_KEY"
CANARY = "sk-fp-canary-7Qx9ZpL2mN4vB8cR"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, CANARY)


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(ScriptedJudge()) as srv:
        yield srv


def make_judge(server: FakeLLMServer, **overrides: Any) -> Any:
    """The litellm judge against ``server``; behind a result store when ``store_path`` is given."""
    settings: dict[str, Any] = {
        "model": "openai/fake-judge",
        "api_base": server.base_url,
        "api_key_env": KEY_ENV,
        "timeout_s": 2.0,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
    }
    settings.update(overrides)
    clock, sleep = settings.pop("clock", None), settings.pop("sleep", None)
    store, refresh = settings.pop("store_path", None), settings.pop("refresh", False)
    judge = LiteLLMJudge(JudgeSettings(**settings), clock=clock, sleep=sleep)
    return judge if store is None else JudgeStack(judge, open_store(store), refresh=refresh)


def run(
    judge: Judge, rows: Sequence[TypicalRow], progress: list[int] | None = None
) -> tuple[list[ExtractResult], list[VerdictResult]]:
    """Both steps the way the pipeline calls them: verdicts only for rows with claims and context."""

    async def main() -> tuple[list[ExtractResult], list[VerdictResult]]:
        tick: Hooks[Any] = Hooks(progress=progress.append if progress is not None else None)
        try:
            extracted = await judge.extract_claims(
                [ExtractItem(f"r{k}", r.answer, r.question) for k, r in enumerate(rows)], tick
            )
            items = [
                VerdictItem(f"r{k}", e.claims, rows[k].context)
                for k, e in enumerate(extracted)
                if e.claims and rows[k].context
            ]
            return extracted, await judge.judge_claims(items, tick)
        finally:
            await judge.aclose()

    return asyncio.run(main())


def both(results: tuple[list[ExtractResult], list[VerdictResult]]) -> list[ExtractResult | VerdictResult]:
    return [*results[0], *results[1]]


def verdict_tuples(result: VerdictResult) -> list[tuple[str, bool, int | None, str | None]]:
    assert result.verdicts is not None
    return [(v.verdict, v.speculative, v.evidence, v.reason) for v in result.verdicts]


def assert_scripted(rows: Sequence[TypicalRow], extracted: list[ExtractResult], verdicts: list[VerdictResult]) -> None:
    assert [e.id for e in extracted] == [f"r{k}" for k in range(len(rows))]
    by_id = {v.id: v for v in verdicts}
    for k, (row, ext) in enumerate(zip(rows, extracted, strict=True)):
        assert ext.error is None and ext.claims == row.claims
        assert verdict_tuples(by_id[f"r{k}"]) == script_verdicts(row.claims)


# ------------------------------------------------------------------------------------- exactness


def test_500_answers_in_three_languages_get_exactly_the_scripted_verdicts(server: FakeLLMServer) -> None:
    rows = typical_rows(500, seed=5)
    judge = make_judge(server)
    assert isinstance(judge, Judge)
    assert judge.prompt_version == PROMPT_VERSION and judge.model_name == "openai/fake-judge"
    progress: list[int] = []
    extracted, verdicts = run(judge, rows, progress)
    assert_scripted(rows, extracted, verdicts)
    kinds = {v for r in verdicts for v, *_ in verdict_tuples(r)}
    assert kinds == {"supported", "contradicted", "unsupported"}
    assert sum(progress) == len(extracted) + len(verdicts)

    # Usage shares add up exactly to what the server billed, and to the judge's own totals.
    s, st = server.stats(), judge.stats()
    usages = [r.usage for r in both((extracted, verdicts))]
    assert s.requests == s.ok == st.requests
    assert sum(u.prompt_tokens for u in usages) == s.prompt_tokens == st.prompt_tokens
    assert sum(u.completion_tokens for u in usages) == s.completion_tokens == st.completion_tokens
    assert math.isclose(sum(u.llm_calls for u in usages), s.requests)
    assert all(u.cost_usd is None for u in usages) and st.cost_usd is None
    assert any("no price known" in n for n in st.notes)
    assert s.requests / len(rows) <= 0.5


def test_nothing_to_ask_costs_no_call(server: FakeLLMServer) -> None:
    judge = make_judge(server)

    async def main() -> tuple[list[ExtractResult], list[VerdictResult]]:
        ex = await judge.extract_claims([ExtractItem("a", ""), ExtractItem("b", "  \n ")])
        ve = await judge.judge_claims([VerdictItem("c", ("x.", "y."), ()), VerdictItem("d", (), ("p",))])
        await judge.aclose()
        return ex, ve

    extracted, verdicts = asyncio.run(main())
    assert [e.claims for e in extracted] == [(), ()]
    assert verdicts[0].verdicts is not None
    assert [(v.verdict, v.reason) for v in verdicts[0].verdicts] == [("unsupported", NO_CONTEXT_REASON)] * 2
    assert verdicts[1].verdicts == ()
    assert server.stats().requests == 0 and judge.stats().requests == 0


REWRITES = {
    "Hello!": [],
    "The bridge opened in 1998 and cost $3M.": ["The bridge opened in 1998.", "The bridge cost $3M."],
    "It is 2 km long.": ["The bridge is 2 km long."],
    "Can I help with anything else?": [],
    "你好！": [],
    "台北101於2004年完工，高508公尺。": ["台北101於2004年完工。", "台北101高508公尺。"],
    "它很有名。": ["台北101很有名。"],
    "안녕하세요!": [],
    "더 궁금한 점이 있나요?": [],
}


def test_claims_come_back_as_sentences_kept_dropped_or_written_out_and_are_rebuilt_as_texts() -> None:
    answers = [
        "Hello! The bridge opened in 1998 and cost $3M. It is 2 km long. Can I help with anything else?",
        "你好！台北101於2004年完工，高508公尺。它很有名。這座塔可能會再整修 [S?]。",
        "안녕하세요! 서울은 한국의 수도이다. 아마 내일 비가 올 것이다 [U?]. 더 궁금한 점이 있나요?",
    ]
    rows = [
        TypicalRow(lang, "q?", a, ("The bridge opened in 1998.",), tuple(script_claims(a, REWRITES)))
        for lang, a in zip(("en", "zh", "ko"), answers, strict=True)
    ]
    assert rows[0].claims == ("The bridge opened in 1998.", "The bridge cost $3M.", "The bridge is 2 km long.")
    assert rows[2].claims == ("서울은 한국의 수도이다.", "아마 내일 비가 올 것이다 [U?].")
    with FakeLLMServer(ScriptedJudge(rewrites=REWRITES), capture=True) as srv:
        extracted, verdicts = run(make_judge(srv), rows)
        sent = [r for r in srv.requests_log if '"sentences"' in r.messages[1]["content"]]
    assert_scripted(rows, extracted, verdicts)
    # The prompt numbered the sentences; the judge marked kept ones true, the rest false or written out.
    assert sent and '"sentences":{"1":"Hello!","2":"The bridge opened in 1998 and cost $3M."' in sent[0].messages[1]["content"]


# -------------------------------------------------------------------------------------- salvage


def _salvage_rows() -> list[TypicalRow]:
    marks = {3: "#drop", 7: "#invent", 12: "#count", 20: "#code", 33: "#drop"}
    rows: list[TypicalRow] = []
    for k in range(40):
        tag = f" {marks[k]}" if k in marks else ""
        answer = f"Fact one about item {k}{tag}. Fact two about item {k} [U]."
        ctx = (f"Passage about item {k}.", "Another passage.")
        rows.append(TypicalRow("en", f"What about {k}?", answer, ctx, tuple(script_claims(answer))))
    return rows


def test_bad_replies_keep_what_validated_and_reask_only_the_rest() -> None:
    rows = _salvage_rows()
    modes = {"#drop": "drop", "#invent": "invent", "#count": "wrong_count", "#code": "bad_code"}
    script = ScriptedJudge(misbehave=modes)
    bad_answers = {r.answer for r in rows if "#" in r.answer}
    with FakeLLMServer(script) as srv:
        judge = make_judge(srv, max_items_per_pack=16)
        extracted, verdicts = run(judge, rows)
        requests = srv.stats().requests
    assert_scripted(rows, extracted, verdicts)
    requests_expected = retries_expected = 0
    for step in ("extract", "verdict"):
        # A re-ask holds only items asked before; it may reach the server before a first-round pack that
        # waited for a new connection, so the rounds are told apart by what they hold, not by arrival.
        first, again, seen = [], [], set[str]()
        for call in (c for c in script.calls if c.step == step):
            (again if seen.issuperset(call.texts) else first).append(call)
            seen.update(call.texts)
        assert sum(len(c.texts) for c in first) == 40  # every item once, then the re-asks
        reasked = [t for c in again for t in c.texts]
        if step == "extract":
            assert sorted(reasked) == sorted(bad_answers)  # each bad item once, nothing else
        else:
            assert len(reasked) == len(bad_answers) and all("#" in t for t in reasked)
        # One re-ask per pack that held bad items, holding only those.
        assert len(again) == sum(any("#" in t for t in c.texts) for c in first)
        requests_expected += len(first) + len(again)
        retries_expected += len(again)
    assert requests == requests_expected
    assert judge.stats().retries == retries_expected


@pytest.mark.parametrize("stream", ["no", "yes"])
def test_replies_cut_short_are_salvaged(server: FakeLLMServer, stream: str) -> None:
    rows = typical_rows(60, seed=8)
    server.set_faults(FaultPlan(rate_partial=0.5, seed=4))
    # Half the replies cut: an item alone is cut on 7 tries in a row once in 128, so with the default 6 retries
    # some of ~100 items would run out of them on most seeds (the body, streamed or not, is the seed too).
    judge = make_judge(server, stream=stream, max_retries=10)
    extracted, verdicts = run(judge, rows)
    assert_scripted(rows, extracted, verdicts)
    assert server.stats().by_outcome.get("partial", 0) > 0


# --------------------------------------------------------------------------------------- faults


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def test_429_retry_after_is_honoured_by_every_request(server: FakeLLMServer) -> None:
    rows = typical_rows(45, seed=2)
    server.set_faults(FaultPlan(rate_429=0.4, retry_after_s=7.0, seed=3))
    t = FakeTime()
    # A Retry-After within the ceiling is waited out (a longer one fails: tests/reliability/test_hostile_replies.py).
    judge = make_judge(server, clock=t.clock, sleep=t.sleep, max_concurrency=4, retry_after_max_s=7.0)
    extracted, verdicts = run(judge, rows)
    assert_scripted(rows, extracted, verdicts)
    c = judge.limiter.counters
    n429 = server.stats().by_outcome["429"]
    assert n429 >= 3
    assert c.rate_limited == c.retry_after_honoured == n429  # every 429 reached our limiter
    assert c.pauses_s == [7.0] * n429
    waits = [s for s in t.sleeps if s > 0]
    assert waits and all(s <= 7.0 + 1e-9 for s in waits)
    assert max(waits) > 6.0  # requests really waited for the announced time (on the fake clock)
    assert c.min_cap_seen < 4  # and the shared cap went down
    assert server.stats().requests == server.stats().ok + n429


def test_429_without_retry_after_backs_off_exponentially(server: FakeLLMServer) -> None:
    rows = typical_rows(30, seed=2)
    server.set_faults(FaultPlan(rate_429_no_retry_after=0.4, seed=5))
    t = FakeTime()
    judge = make_judge(server, clock=t.clock, sleep=t.sleep, backoff_base_s=1.0, backoff_max_s=8.0)
    extracted, verdicts = run(judge, rows)
    assert_scripted(rows, extracted, verdicts)
    c = judge.limiter.counters
    assert c.rate_limited == server.stats().no_retry_after_429 > 0
    assert c.retry_after_honoured == 0
    assert all(0.5 <= p <= 8.0 for p in c.pauses_s)


@pytest.mark.parametrize("stream", ["no", "yes"])
def test_heavy_faults_lose_no_item_and_change_no_ok_result(stream: str) -> None:
    rows = typical_rows(90, seed=9)
    # 5 % hangs: at 2 % some seeds (and a streamed request's body is another seed) have none in ~110 requests.
    faults = FaultPlan(rate_429=0.3, retry_after_s=0.01, rate_5xx=0.1, rate_malformed=0.1, rate_hang=0.05, seed=0)
    with FakeLLMServer(ScriptedJudge(), faults=faults) as srv:
        # Streamed, a hang (nothing sent, not even the first token) is cut by the bound on the whole request.
        judge = make_judge(srv, timeout_s=1.0, stream=stream, stream_max_s=1.0)
        extracted, verdicts = run(judge, rows)
        outcomes = srv.stats().by_outcome
    for kind in ("429", "5xx", "malformed", "hang"):
        assert outcomes.get(kind, 0) > 0, outcomes
    assert [e.id for e in extracted] == [f"r{k}" for k in range(len(rows))]
    by_id = {v.id: v for v in verdicts}
    ok = 0
    for k, (row, ext) in enumerate(zip(rows, extracted, strict=True)):
        if ext.error is not None:
            assert ext.claims is None and ext.error.strip()
            continue
        assert ext.claims == row.claims
        result = by_id[f"r{k}"]
        if result.error is not None:
            assert result.verdicts is None and result.error.strip()
            continue
        assert verdict_tuples(result) == script_verdicts(row.claims)
        ok += 1
    assert ok >= 0.9 * len(rows)
    st = judge.stats()
    assert st.failed_items == sum(r.error is not None for r in both((extracted, verdicts)))
    assert st.retries > 0


@pytest.mark.parametrize("stream", ["no", "yes"])
def test_hangs_end_in_error_rows_not_exceptions(server: FakeLLMServer, stream: str) -> None:
    rows = typical_rows(4, seed=1)
    server.set_faults(FaultPlan(rate_hang=1.0))
    judge = make_judge(server, timeout_s=0.3, max_retries=1, stream=stream, stream_max_s=0.3)
    extracted, verdicts = run(judge, rows)
    assert verdicts == []
    assert all(e.claims is None and e.error is not None and "timed out" in e.error for e in extracted)
    assert all(e.usage.llm_calls > 0 and e.usage.prompt_tokens == 0 for e in extracted)


# ---------------------------------------------------------------------------------------- store


def test_store_makes_reruns_free_and_refresh_pays_again(server: FakeLLMServer, tmp_path: Path) -> None:
    rows = typical_rows(60, seed=4)
    store = tmp_path / "results.sqlite"
    first = run(make_judge(server, store_path=store), rows)
    paid = server.stats().requests
    assert paid > 0

    server.reset_stats()
    # Timeouts, concurrency and pack size do not change what a reply says: same keys.
    again = make_judge(server, store_path=store, timeout_s=5, max_concurrency=2, pack_tokens=3000)
    second = run(again, rows)
    assert server.stats().requests == 0 and again.stats().requests == 0
    assert again.stats().cached_items == len(first[0]) + len(first[1])
    assert_scripted(rows, *second)
    for old, new in zip(both(first), both(second), strict=True):
        assert new.cached and not old.cached
        assert new.usage == old.usage  # the original cost, so BI totals stay right on re-runs

    server.reset_stats()
    fresh = make_judge(server, store_path=store, refresh=True)
    third = run(fresh, rows)
    assert server.stats().requests == paid
    assert not any(r.cached for r in both(third))

    server.reset_stats()
    reseeded = run(make_judge(server, store_path=store, seed=1), rows)  # a different seed: new results
    assert server.stats().requests == paid
    assert_scripted(rows, *reseeded)


def test_a_rerun_pays_only_for_what_is_missing(tmp_path: Path) -> None:
    rows = typical_rows(40, seed=6)
    script = ScriptedJudge()
    with FakeLLMServer(script) as srv:
        run(make_judge(srv, store_path=tmp_path / "r.sqlite"), rows[:25])
        before = len(script.calls)
        extracted, verdicts = run(make_judge(srv, store_path=tmp_path / "r.sqlite"), rows)
    assert_scripted(rows, extracted, verdicts)
    asked = {t for c in script.calls[before:] if c.step == "extract" for t in c.texts}
    assert asked == {" ".join(script_sentences(r.answer)) for r in rows[25:]}
    assert sum(e.cached for e in extracted) == 25


def test_unreadable_stored_results_are_asked_for_again(server: FakeLLMServer, tmp_path: Path) -> None:
    rows = typical_rows(20, seed=13)
    store = tmp_path / "r.sqlite"
    run(make_judge(server, store_path=store), rows)
    paid = server.stats().requests
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE results SET value = '{\"not\": \"ours\"}'")
    server.reset_stats()
    judge = make_judge(server, store_path=store)
    extracted, verdicts = run(judge, rows)
    assert_scripted(rows, extracted, verdicts)
    assert server.stats().requests == paid and not any(r.cached for r in both((extracted, verdicts)))
    assert any("unreadable" in n for n in judge.stats().notes)


def test_a_partly_warm_pipeline_run_counts_each_stored_result_once(server: FakeLLMServer, tmp_path: Path) -> None:
    # Through the pipeline, which asks the store for whole columns first: rows whose claims are stored but
    # whose verdicts are not must count their claims once, not once per lookup path.
    rows = typical_rows(40, seed=9)
    frame = pl.DataFrame({
        "conversation_id": [f"c{k}" for k in range(len(rows))],
        "input": [r.question for r in rows],
        "output": [r.answer for r in rows],
        "context": [list(r.context) for r in rows],
    })
    store = tmp_path / "results.sqlite"

    def score(**overrides: Any) -> tuple[pl.DataFrame, JudgeStats]:
        judge = make_judge(server, store_path=store, **overrides)

        async def main() -> pl.DataFrame:
            try:
                return await score_frame_async(frame, judge, ScoringConfig())
            finally:
                await judge.aclose()

        return asyncio.run(main()), judge.stats()

    cold, stats = score()
    assert stats.cached_items == 0
    # rows with a stored claims result and a stored verdicts result
    judged = cold.filter(pl.col("n_claims") > 0, pl.col("context").list.len() > 0).height
    extracted = cold.filter(pl.col("output").str.strip_chars() != "").height
    warm, stats = score()
    assert stats.requests == 0 and stats.cached_items == extracted + judged
    with sqlite3.connect(store) as conn:
        # verdicts gone, and with them the whole rows that hold them
        conn.execute("DELETE FROM results WHERE step IN ('verdict', 'row')")
    again, stats = score()
    assert stats.requests > 0
    assert stats.cached_items == extracted  # the claims, each counted once
    for table in (warm, again):
        assert table.drop(S.RUN_COLUMNS).equals(cold.drop(S.RUN_COLUMNS))


def test_a_pack_whose_items_were_stored_while_it_waited_for_a_slot_is_not_sent(tmp_path: Path) -> None:
    # Another process (here: a direct write) stores a pack's items after the pack's first look in the
    # store but before its request gets a slot: the last look, made holding the slot, must catch it.
    from faithfulness_pipeline.core.port import Usage
    from faithfulness_pipeline.judging.store.codec import encode_claims
    from faithfulness_pipeline.judging.store.sqlite import ResultStore

    store = tmp_path / "shared.sqlite"
    items = [ExtractItem(f"r{k}", f"Item {k} makes one claim.", None) for k in range(4)]
    with FakeLLMServer(ScriptedJudge(), latency=Latency(base_s=0.6)) as srv:
        judge = make_judge(srv, store_path=store, max_concurrency=1, max_items_per_pack=2)

        async def other_process() -> None:
            await asyncio.sleep(0.3)  # the first pack is out, the second waits for the only slot
            writer = ResultStore(store)
            value = encode_claims(("stored by the other process",), Usage(1.0, 10, 5, 0.0))
            keys = KeyMaker(*judge.inner.result_scope().extract)
            writer.put_many([(keys.key(None, item.answer), "extract", value) for item in items[2:]])
            writer.close()

        async def main() -> list[ExtractResult]:
            try:
                results, _ = await asyncio.gather(judge.extract_claims(items), other_process())
                return results
            finally:
                await judge.aclose()

        results = asyncio.run(main())
        requests = srv.stats().requests
    assert requests == 1
    assert [r.claims for r in results[2:]] == [("stored by the other process",)] * 2
    assert all(r.error is None and r.claims and "stored" not in r.claims[0] for r in results[:2])
    assert judge.stats().cached_items == 2


def test_an_unusable_store_path_fails_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="result store"):
        make_from_settings(
            JudgeSettings(model="openai/fake-judge", api_base="http://127.0.0.1:9/v1", api_key_env=KEY_ENV,
                          store=str(tmp_path))
        )


# ------------------------------------------------------------------------------------ structure


def test_json_schema_response_format_when_asked() -> None:
    rows = typical_rows(12, seed=3)
    with FakeLLMServer(ScriptedJudge(), capture=True) as srv:
        judge = make_judge(srv, use_json_schema="yes")
        extracted, verdicts = run(judge, rows)
        log = list(srv.requests_log)
    assert_scripted(rows, extracted, verdicts)
    assert log and all(r.response_format and r.response_format["type"] == "json_schema" for r in log)
    schema = log[0].response_format["json_schema"]["schema"]  # type: ignore[index]
    assert schema["required"][0] == "a1" and schema["additionalProperties"] is False
    assert all(r.temperature == 0 and r.seed == 0 and r.max_tokens for r in log)


def test_json_in_prompt_when_the_schema_is_turned_off() -> None:
    with FakeLLMServer(ScriptedJudge(), capture=True) as srv:
        run(make_judge(srv, use_json_schema="no"), typical_rows(3, seed=3))
        assert srv.requests_log and all(r.response_format is None for r in srv.requests_log)


def _long_rows() -> list[TypicalRow]:
    big = tuple(f"Passage {i}: " + " ".join(["the river station report"] * 120) for i in range(8))
    mid = tuple(" ".join(["museum harbour market"] * 100) for _ in range(3))
    answer = "The report mentions the river. The station is old [U]."
    claims = tuple(script_claims(answer))
    return [
        TypicalRow("en", "q", answer, big, claims),
        TypicalRow("en", "q", answer + " One more.", mid, (*claims, "One more.")),
        TypicalRow("en", "q", answer + " Two more.", (*mid[:2], "x"), (*claims, "Two more.")),
    ]


def test_only_an_item_alone_over_the_window_is_truncated(server: FakeLLMServer) -> None:
    rows = _long_rows()
    judge = make_judge(server, context_window=2048)
    extracted, verdicts = run(judge, rows)
    assert_scripted(rows, extracted, verdicts)
    assert [v.context_truncated for v in verdicts] == [True, False, False]
    # The two mid-sized rows do not fit one request together: split into two requests, not cut.
    assert server.stats().requests == 1 + 3


def test_long_answers_are_never_cut(server: FakeLLMServer) -> None:
    sentence = "The harbour station report was approved by the council after a long debate about costs. "
    rows = [
        TypicalRow("en", "q", sentence * 28, ("p",), tuple(script_claims(sentence * 28))),  # ~500 tokens
        TypicalRow("en", "q", sentence * 90, ("p",), tuple(script_claims(sentence * 90))),  # ~1600 tokens
    ]
    judge = make_judge(server, context_window=2048)
    extracted, verdicts = run(judge, rows[:1])
    assert_scripted(rows[:1], extracted, verdicts)  # alone, with a tight reply budget: still whole
    extracted, verdicts = run(judge, rows[1:])
    assert extracted[0].claims is None and extracted[0].error is not None
    assert "too long for the model's context window of 2048" in extracted[0].error


def test_cost_from_configured_prices_is_shared_out(server: FakeLLMServer) -> None:
    rows = typical_rows(30, seed=7)
    judge = make_judge(server, input_cost_per_token=1e-6, output_cost_per_token=4e-6)
    extracted, verdicts = run(judge, rows)
    results = both((extracted, verdicts))
    for r in results:
        assert r.usage.cost_usd is not None
        assert math.isclose(r.usage.cost_usd, r.usage.prompt_tokens * 1e-6 + r.usage.completion_tokens * 4e-6)
    s = server.stats()
    st = judge.stats()
    assert st.cost_usd is not None
    assert math.isclose(st.cost_usd, s.prompt_tokens * 1e-6 + s.completion_tokens * 4e-6)
    assert math.isclose(sum(r.usage.cost_usd or 0 for r in results), st.cost_usd)
    assert not any("no price" in n for n in st.notes)


def test_dry_run_estimate_is_within_15_percent_and_free_after_a_run(server: FakeLLMServer, tmp_path: Path) -> None:
    rows = typical_rows(150, seed=12)
    judge = make_judge(server, store_path=tmp_path / "r.sqlite", input_cost_per_token=1e-6, output_cost_per_token=2e-6)
    answers = [ExtractItem(f"r{k}", r.answer, r.question) for k, r in enumerate(rows)]
    guesses = [VerdictItem(f"r{k}", tuple(rough_sentences(r.answer)), r.context) for k, r in enumerate(rows)]
    estimate = estimate_items(judge, answers, guesses)
    assert server.stats().requests == 0  # the estimate calls nothing
    run(judge, rows)
    s = server.stats()
    assert abs(estimate.prompt_tokens / s.prompt_tokens - 1) <= 0.15
    assert abs(estimate.completion_tokens / s.completion_tokens - 1) <= 0.15
    assert abs(estimate.requests / s.requests - 1) <= 0.15
    assert estimate.cost_usd is not None and estimate.cost_usd > 0
    print(
        f"estimate/real: requests {estimate.requests}/{s.requests}, prompt {estimate.prompt_tokens}/"
        f"{s.prompt_tokens}, completion {estimate.completion_tokens}/{s.completion_tokens}"
    )
    after = estimate_items(make_judge(server, store_path=tmp_path / "r.sqlite"), answers, guesses)
    assert after.requests == 0 and after.prompt_tokens == 0 and after.cached_items == 2 * len(rows)


def test_packs_and_usage_shares_do_not_depend_on_concurrency(server: FakeLLMServer) -> None:
    rows = typical_rows(120, seed=14)
    serial = run(make_judge(server, max_concurrency=1), rows)
    wide = run(make_judge(server, max_concurrency=16), rows)
    assert [r.usage for r in both(serial)] == [r.usage for r in both(wide)]  # a resumed run shares alike


def test_one_judge_serves_two_event_loops(server: FakeLLMServer) -> None:
    judge = make_judge(server)
    rows = typical_rows(6, seed=1)
    assert_scripted(rows, *run(judge, rows))
    assert_scripted(rows, *run(judge, rows))


# -------------------------------------------------------------------------------------- secrets


@pytest.mark.filterwarnings("ignore:Item.*ReadOnly:UserWarning", "ignore:Items.*ReadOnly:UserWarning")
def test_a_missing_key_fails_first_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FP_TEST_NO_SUCH_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError, match="FP_TEST_NO_SUCH_KEY") as info:
        LiteLLMJudge(JudgeSettings(model="openai/gpt-4o-mini", api_key_env="FP_TEST_NO_SUCH_KEY"))
    assert isinstance(info.value, ValueError) and isinstance(info.value, ConfigError)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        LiteLLMJudge(JudgeSettings(model="openai/gpt-4o-mini"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ValueError, match="ANTHROPIC_API_KEY"):
        LiteLLMJudge(JudgeSettings(model="anthropic/claude-3-5-haiku-20241022"))
    local = LiteLLMJudge(JudgeSettings(model="ollama/llama3", api_base="http://127.0.0.1:9"))
    assert local.api_key_env is None


def test_redactor_removes_the_key_and_pieces_of_it() -> None:
    redact = Redactor(CANARY)
    text = f"bad key {CANARY}; prefix {CANARY[:12]}...; tail ...{CANARY[-9:]}"
    cleaned = redact(text)
    assert CANARY not in cleaned and CANARY[:12] not in cleaned and CANARY[-9:] not in cleaned
    assert Redactor(None)("unchanged") == "unchanged"


@pytest.mark.parametrize("key", ["k", "ken", "Pipe-1", "sk-abc1"])
def test_a_short_key_is_masked_as_a_whole_token_only(key: str) -> None:
    redact = Redactor(key)
    message = f"BrokenPipeError: sk-abc12 Pipe-12 token={key}; auth: Bearer {key}, ({key})"
    assert redact(message) == (
        "BrokenPipeError: sk-abc12 Pipe-12 token=[REDACTED]; auth: Bearer [REDACTED], ([REDACTED])"
    )


def _files_bytes(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file())


def test_the_key_never_leaves_for_anywhere_but_the_provider(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    rows = typical_rows(9, seed=1)
    with FakeLLMServer(ScriptedJudge(), api_key=CANARY) as srv:
        judge = make_judge(srv, store_path=tmp_path / "store" / "r.sqlite")
        extracted, verdicts = run(judge, rows)
        assert_scripted(rows, extracted, verdicts)  # the key did reach the provider
        text = repr((extracted, verdicts, judge.stats(), judge.inner.settings))
        assert CANARY not in text
        assert CANARY.encode() not in _files_bytes(tmp_path / "store")

    with FakeLLMServer(ScriptedJudge(), api_key="sk-the-right-one") as srv:
        judge = make_judge(srv, max_concurrency=2)
        extracted, verdicts = run(judge, typical_rows(60, seed=1))
        assert srv.stats().by_outcome == {"401": srv.stats().requests}
        assert srv.stats().requests <= 2  # an auth failure stops the run's other requests
    assert verdicts == []
    for e in extracted:
        assert e.claims is None and e.error is not None
        assert "AuthenticationError" in e.error and KEY_ENV in e.error and CANARY not in e.error
    assert CANARY not in repr(judge.stats()) and CANARY not in caplog.text


# ------------------------------------------------------------------------------ reply format and repair


def test_an_answer_whose_reply_skips_a_sentence_is_asked_again_never_read_as_having_no_claim() -> None:
    # What a small model did with many answers packed into one request: it left sentences out. Every
    # sentence must be named, so the answer whose reply skips one fails alone, is asked again alone, and
    # comes back with all its claims; the answers packed with it are kept from the first reply.
    answers = [f"Fact one about item {k}{' #skip' if k == 2 else ''}. Fact two about item {k}. Fact three, {k}."
               for k in range(4)]
    rows = [TypicalRow("en", "q?", a, (f"Passage {k}.",), tuple(script_claims(a))) for k, a in enumerate(answers)]
    script = ScriptedJudge(misbehave={"#skip": "wrong_count"})  # the first reply drops the last sentence
    with FakeLLMServer(script, capture=True) as srv:
        judge = make_judge(srv)
        extracted, _ = run(judge, rows)
        extraction = [r for r in srv.requests_log if '"sentences"' in r.messages[1]["content"]]
    assert [(e.error, e.claims) for e in extracted] == [(None, r.claims) for r in rows]
    assert all(len(r.claims) == 3 for r in rows)
    first, again = extraction  # the packed request, then the one answer alone
    assert first.response_format is not None
    schema = first.response_format["json_schema"]["schema"]
    assert list(schema["properties"]) == ["a1", "a2", "a3", "a4"]
    assert all(schema["properties"][i]["required"] == ["1", "2", "3"] for i in schema["properties"])
    assert [json.loads(line)["id"] for line in _data_lines(again)] == ["a1"]
    assert "#skip" in again.messages[1]["content"]
    assert [c.texts for c in script.calls if c.step == "extract"][1] == (" ".join(script_sentences(answers[2])),)


def _data_lines(request: Any) -> list[str]:
    content = request.messages[1]["content"]
    return content.split("<<<DATA>>>\n", 1)[1].split("\n<<<END DATA>>>", 1)[0].splitlines()


@pytest.mark.parametrize("written", ["1990", "2"])
def test_a_claim_written_out_as_digits_is_a_claim_in_one_request(written: str) -> None:
    # "1990" is no sentence number of the answer, "2" is one: both are claims the judge wrote out (a string
    # in the sentence's list, never a number or ``true``).
    answer = "The bridge opened in 1990. It has two lanes."
    script = ScriptedJudge(rewrites={"The bridge opened in 1990.": [written]})
    with FakeLLMServer(script) as srv:
        judge = make_judge(srv)
        (result,) = asyncio.run(judge.extract_claims([ExtractItem("r0", answer)]))
        asyncio.run(judge.aclose())
        assert srv.stats().requests == 1
    assert result.error is None and result.claims == (written, "It has two lanes.")


def test_an_unusable_reply_is_never_asked_again_with_the_same_request() -> None:
    # The single item's reply is unusable twice (a sentence number out of range); each new request differs
    # from the one before: it quotes the unusable reply and says what was wrong and which try this is.
    rows = typical_rows(1, seed=2)
    script = ScriptedJudge(misbehave={rows[0].answer[:12]: "bad_code"}, times=2)
    with FakeLLMServer(script, capture=True) as srv:
        judge = make_judge(srv)
        extracted, _ = run(judge, rows)
        extraction = [r for r in srv.requests_log if "sentences" in r.messages[1]["content"]]
    assert extracted[0].error is None and extracted[0].claims == rows[0].claims
    assert len(extraction) == 3
    bodies = [json.dumps(r.messages, ensure_ascii=False) for r in extraction]
    assert len(set(bodies)) == 3
    repair = extraction[1].messages[-1]["content"]
    assert extraction[1].messages[-2]["role"] == "assistant" and "does not exist" in repair and "try 2" in repair
    assert "try 3" in extraction[2].messages[-1]["content"]
    assert judge.stats().retries == 4  # the marker also spoils the verdict reply twice: repaired the same way


# ---------------------------------------------------------------------------------- deep nesting


class DeepReplies:
    """Replies nested 100,000 levels deep (past any recursion limit): to the first ``first`` requests, or
    to every request when ``first`` is None; the scripted judge answers the rest."""

    def __init__(self, first: int | None) -> None:
        self.script = ScriptedJudge()
        self.first = first
        self.deep = 0

    def __call__(self, request: Any) -> str:
        if self.first is None or self.deep < self.first:
            self.deep += 1
            return '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
        return self.script(request)


def test_a_deeply_nested_reply_is_an_invalid_reply_retried_like_any_other() -> None:
    rows = typical_rows(24, seed=5)
    responder = DeepReplies(first=3)
    with FakeLLMServer(responder) as srv:
        extracted, verdicts = run(make_judge(srv), rows)
    assert responder.deep == 3
    assert_scripted(rows, extracted, verdicts)  # every item got its result after the re-asks


def test_replies_that_are_always_too_deep_end_as_item_errors_after_the_retries() -> None:
    rows = typical_rows(6, seed=6)
    responder = DeepReplies(first=None)
    with FakeLLMServer(responder) as srv:
        # Whole replies: streamed, litellm ends this one early as a model repeating itself (tests/judging/
        # test_slow_servers.py), before the parser's depth limit, the subject here, is reached.
        extracted, _ = run(make_judge(srv, max_retries=2, stream="no"), rows)
    assert responder.deep > 1  # re-asked, not given up on the first reply
    assert all(e.error is not None and "nests deeper than" in e.error for e in extracted), [e.error for e in extracted]
    assert not any("internal error" in (e.error or "") for e in extracted)


def test_the_settings_hash_follows_what_changes_replies_and_nothing_else() -> None:
    """The scored table's judge_settings_hash: equal for settings that give the same replies (timeouts,
    concurrency, a trailing slash), different for the prompts' inputs that change them."""
    from faithfulness_pipeline.core.port import settings_hash

    def hashed(**settings: Any) -> str:
        fields = {"model": "openai/fake-judge", "api_base": "http://127.0.0.1:9/v1", "api_key_env": KEY_ENV, **settings}
        return settings_hash(LiteLLMJudge(JudgeSettings(**fields)).result_scope())

    base = hashed()
    assert re.fullmatch(r"[0-9a-f]{16}", base)
    same = [hashed(timeout_s=9.0), hashed(max_concurrency=3), hashed(api_base="http://127.0.0.1:9/v1/"),
            hashed(stream="no"), hashed(stream_max_s=60.0)]
    assert same == [base] * 5
    changed = [hashed(temperature=0.5), hashed(seed=7), hashed(model="openai/other"),
               hashed(api_base="http://127.0.0.1:10/v1"), hashed(use_json_schema="no")]
    assert base not in changed and len(set(changed)) == len(changed), changed
    assert CANARY not in base
