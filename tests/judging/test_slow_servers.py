"""Slow servers (issue 38 item 4): a judge streams the replies of a server of its own and waits for one as long
as its tokens keep coming; silence in the middle of a reply is a timeout, retried like any; progress hears the
tokens arrive while no row is done yet.

Real HTTP to the fake server through litellm. The fake server plays a slow server with ``Latency`` (a streamed
reply comes a piece at a time, ``per_output_token_s`` apart per token) and one that dies mid-reply with the
``stall`` fault (half the reply, then silence).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest

from faithfulness_pipeline.core.port import ExtractItem, ExtractResult, Hooks, VerdictItem, VerdictResult
from faithfulness_pipeline.judging.llm.card import model_card
from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
from faithfulness_pipeline.judging.llm.part_settings import CardSettings
from faithfulness_pipeline.judging.llm.requests import Receiving
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import ChatRequest, FakeLLMServer, FaultPlan, Latency, ServedLimits
from faithfulness_pipeline.testing.scripted import ScriptedJudge, TypicalRow, script_verdicts, typical_rows

KEY_ENV = "FP_TEST_SLOW_KEY"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-slow")


def _judge(server: FakeLLMServer, receiving: Receiving | None = None, **extra: Any) -> LiteLLMJudge:
    settings: dict[str, Any] = {"model": "openai/fake-judge", "api_base": server.base_url, "api_key_env": KEY_ENV,
                                "backoff_base_s": 0.01, "backoff_max_s": 0.05, **extra}
    return LiteLLMJudge(JudgeSettings(**settings), receiving=receiving)


def _run(judge: LiteLLMJudge, rows: Sequence[TypicalRow], hooks: Hooks[Any] | None = None
         ) -> tuple[list[ExtractResult], list[VerdictResult]]:
    async def main() -> tuple[list[ExtractResult], list[VerdictResult]]:
        try:
            extracted = await judge.extract_claims(
                [ExtractItem(f"r{k}", r.answer, r.question) for k, r in enumerate(rows)], hooks)
            items = [VerdictItem(f"r{k}", e.claims, rows[k].context) for k, e in enumerate(extracted) if e.claims]
            return extracted, await judge.judge_claims(items, hooks)
        finally:
            await judge.aclose()

    return asyncio.run(main())


def _all_scripted(rows: Sequence[TypicalRow], extracted: list[ExtractResult], verdicts: list[VerdictResult]) -> None:
    assert [e.error for e in extracted] == [None] * len(rows)
    assert [e.claims for e in extracted] == [r.claims for r in rows]
    by_id = {v.id: v for v in verdicts}
    for k, row in enumerate(rows):
        result = by_id[f"r{k}"]
        assert result.error is None and result.verdicts is not None
        assert [(v.verdict, v.speculative, v.evidence, v.reason) for v in result.verdicts] == script_verdicts(row.claims)


#: A second before the first token (a server reading the prompt), then a token every 20 ms: every reply takes
#: longer than the 0.6 s timeout, and the fake server's pieces (16 characters, 12 tokens at most) come 0.25 s
#: apart at most.
SLOW = Latency(base_s=1.0, per_output_token_s=0.02)


def test_a_reply_longer_than_the_timeout_in_all_is_waited_for_while_its_tokens_keep_coming() -> None:
    rows = typical_rows(4, seed=1)
    with FakeLLMServer(ScriptedJudge(), latency=SLOW, capture=True, prompt_cache=True) as server:
        judge = _judge(server, timeout_s=0.6)  # stream auto: an endpoint behind an api_base
        extracted, verdicts = _run(judge, rows)
        stats = server.stats()
        streamed = [r.stream for r in server.requests_log]
    _all_scripted(rows, extracted, verdicts)
    assert streamed == [True] * stats.requests
    # Every reply was longer than the timeout, its first token too, and none was cut by the client (no
    # "cancelled") or asked twice.
    assert stats.modelled_latency_s > stats.requests * 1.0
    assert stats.by_outcome == {"ok": stats.requests} and judge.stats().retries == 0
    # Billed as the server reported each streamed reply: its usage chunk, cached tokens too.
    spent = judge.stats()
    assert (spent.prompt_tokens, spent.completion_tokens, spent.cached_prompt_tokens) == (
        stats.billed_prompt_tokens, stats.billed_completion_tokens, stats.billed_cached_prompt_tokens)
    results: list[ExtractResult | VerdictResult] = [*extracted, *verdicts]
    billed = [r.usage for r in results]
    assert sum(u.prompt_tokens for u in billed) == stats.billed_prompt_tokens
    assert sum(u.completion_tokens for u in billed) == stats.billed_completion_tokens
    assert not any("estimates" in note for note in spent.notes)


def test_without_streaming_the_timeout_still_bounds_the_whole_request() -> None:
    rows = typical_rows(4, seed=1)
    with FakeLLMServer(ScriptedJudge(), latency=SLOW, capture=True) as server:
        judge = _judge(server, timeout_s=0.6, stream="no", max_retries=1)
        extracted, verdicts = _run(judge, rows)
        # The server counts a request cancelled when it notices the client has left, which may come after the
        # client has moved on: the outcomes add up to the requests once none is open (CI once read 2 of 3).
        deadline = time.monotonic() + 10
        while server.stats().open_requests and time.monotonic() < deadline:
            time.sleep(0.01)
        stats = server.stats()
        streamed = {r.stream for r in server.requests_log}
    assert streamed == {False}
    # Every reply is longer than the timeout: each was cut, twice an item, and the rows say so.
    assert verdicts == [] and [e.error for e in extracted] == ["gave up after 2 requests: timed out after 0.6 s"] * 4
    assert stats.by_outcome == {"cancelled": stats.requests}  # the server saw the client leave each reply


def test_a_server_that_goes_silent_mid_reply_is_timed_out_and_asked_again() -> None:
    rows = typical_rows(12, seed=2)
    # A quarter of the replies stall: an item alone stalls on 7 tries in a row once in 16,000. A timeout of a
    # second: the replies that do not stall must not be taken for silent on a machine busy with other tests.
    with FakeLLMServer(ScriptedJudge(), faults=FaultPlan(rate_stall=0.25, seed=3)) as server:
        judge = _judge(server, timeout_s=1.0, max_items_per_pack=4)
        extracted, verdicts = _run(judge, rows)
        stats = server.stats()
    assert stats.by_outcome.get("stall", 0) > 0 and judge.stats().retries > 0
    assert stats.open_requests == 0  # every stalled reply's connection was closed: the server stops on it
    _all_scripted(rows, extracted, verdicts)


def test_a_server_that_always_goes_silent_ends_in_visible_error_rows() -> None:
    rows = typical_rows(6, seed=2)
    with FakeLLMServer(ScriptedJudge(), faults=FaultPlan(rate_stall=1.0)) as server:
        judge = _judge(server, timeout_s=0.3, max_retries=1, max_items_per_pack=2)
        extracted, verdicts = _run(judge, rows)
    assert verdicts == [] and len(extracted) == len(rows)
    for result in extracted:
        assert result.claims is None and result.error is not None
        assert "timed out: nothing came for 0.3 s in the middle of a streamed reply (--timeout)" in result.error
        assert result.usage.llm_calls > 0  # what the attempts cost stays on the rows


#: Every streamed reply goes silent for 1.2 s halfway, as llama.cpp's streams do while it reads another
#: request's prompt, then goes on.
PAUSING = Latency(pause_s=1.2)


@pytest.mark.parametrize("kind", ["llama.cpp", "vllm"])
def test_a_silence_the_server_says_is_work_is_waited_out_and_other_silences_are_not(kind: str) -> None:
    """llama.cpp says which slots are working (``/slots``): a stream quiet past the timeout while it says so is
    waited for, not cancelled. vLLM says nothing of the kind: the same silence is a timeout, asked again."""
    rows = typical_rows(4, seed=1)
    limits = ServedLimits(kind, 8192, slots=4)  # type: ignore[arg-type]
    with FakeLLMServer(ScriptedJudge(), latency=PAUSING, limits=limits) as server:
        judge = _judge(server, timeout_s=0.5, max_retries=1)
        extracted, verdicts = _run(judge, rows)
        stats = server.stats()
        probes = list(server.probes_log)
    if kind == "llama.cpp":
        _all_scripted(rows, extracted, verdicts)
        assert stats.by_outcome == {"ok": stats.requests} and judge.stats().retries == 0  # nothing cancelled
        assert "GET /slots" in probes
        assert any("said it was working (llama.cpp /slots" in note for note in judge.stats().notes)
    else:
        assert "GET /slots" not in probes
        assert stats.by_outcome.get("cancelled", 0) > 0
        assert all(e.error is not None and "nothing came for 0.5 s" in e.error for e in extracted)


@pytest.mark.parametrize("stream", ["auto", "no"])
def test_a_reply_that_trickles_in_a_byte_at_a_time_is_cut_at_the_timeout(stream: str) -> None:
    """Issue 52: a byte every 0.25 s brings no piece of a reply for seconds on end, so the server's stream is
    silent, and it says nothing of working: ``--timeout 1`` cuts each request a second after the server began
    its reply, streamed (``auto`` streams behind an api_base) or whole. The bug held each request for the
    whole body, a minute and more; the bound here is a behaviour's, with room for a busy machine."""
    rows = typical_rows(1, seed=3)
    with FakeLLMServer(ScriptedJudge(), faults=FaultPlan(rate_trickle=1.0, trickle_s=0.25)) as server:
        judge = _judge(server, timeout_s=1.0, stream=stream, max_retries=1)
        started = time.monotonic()
        extracted, verdicts = _run(judge, rows)
        elapsed = time.monotonic() - started
        stats = server.stats()
    assert elapsed < 10, f"held for {elapsed:.0f} s"
    assert verdicts == [] and judge.stats().requests == 2 == stats.by_outcome.get("trickle")
    cut = ("timed out: the server began a streamed reply and sent no piece of it for 1 s (--timeout)"
           if stream == "auto" else "timed out after 1 s")
    assert [e.error for e in extracted] == [f"gave up after 2 requests: {cut}"]


def test_a_server_that_sends_nothing_at_all_is_cut_by_the_bound_on_the_whole_request() -> None:
    rows = typical_rows(2, seed=2)
    with FakeLLMServer(ScriptedJudge(), faults=FaultPlan(rate_hang=1.0)) as server:
        judge = _judge(server, timeout_s=0.2, stream_max_s=0.5, max_retries=0, max_items_per_pack=1)
        extracted, _ = _run(judge, rows)
    assert [e.error for e in extracted] == ["gave up after 1 requests: timed out: a streamed reply took over 0.5 s "
                                            "in all, the wait for its first token included (--stream-max)"] * 2


def test_progress_hears_tokens_arrive_while_a_reply_streams() -> None:
    rows = typical_rows(4, seed=1)
    heard: list[tuple[str, float, float]] = []

    def receiving(tokens: int) -> None:
        heard.append(("tokens", time.monotonic(), tokens))

    hooks: Hooks[Any] = Hooks(progress=lambda n: heard.append(("rows", time.monotonic(), n)))
    with FakeLLMServer(ScriptedJudge(), latency=SLOW) as server:
        judge = _judge(server, receiving, timeout_s=5, max_items_per_pack=4)
        _run(judge, rows, hooks)
    first_rows = next(at for kind, at, _ in heard if kind == "rows")
    before = [(at, n) for kind, at, n in heard if kind == "tokens" and at < first_rows]
    # The extraction reply took a second or so: its tokens were heard along the way, not at its end.
    assert len(before) >= 3 and before[-1][0] - before[0][0] >= 0.4
    tokens = sum(n for kind, _, n in heard if kind == "tokens")
    # Counted a piece at a time with the judge's tokenizer: about what the server counted for the whole replies.
    assert 0.7 * judge.stats().completion_tokens <= tokens <= 1.5 * judge.stats().completion_tokens


def test_whole_replies_are_not_heard_as_tokens() -> None:
    heard: list[int] = []
    with FakeLLMServer(ScriptedJudge()) as server:
        extracted, _ = _run(_judge(server, heard.append, stream="no"), typical_rows(2, seed=1))
    assert all(e.error is None for e in extracted) and heard == []


def test_a_listener_that_fails_is_dropped_and_the_rows_are_scored() -> None:
    calls: list[int] = []

    def broken(tokens: int) -> None:
        calls.append(tokens)
        raise RuntimeError("the progress bar broke")

    rows = typical_rows(3, seed=4)
    with FakeLLMServer(ScriptedJudge()) as server:
        extracted, verdicts = _run(_judge(server, broken), rows)
    assert len(calls) == 1
    _all_scripted(rows, extracted, verdicts)


def test_a_stream_without_usage_is_billed_at_the_judges_estimates() -> None:
    # gpt-4o-mini: the judge counts with o200k_base, litellm (which makes up a usage when the server sent none)
    # and the server with cl100k_base, so the figures tell whose count was taken.
    rows = typical_rows(6, seed=5)
    items = [ExtractItem(f"r{k}", r.answer, r.question) for k, r in enumerate(rows)]
    script = ScriptedJudge()
    with FakeLLMServer(script, capture=True, stream_usage=False) as server:
        judge = _judge(server, model="openai/gpt-4o-mini", stream="yes")
        estimate = judge.estimate(items, [])

        async def extract() -> list[ExtractResult]:
            try:
                return await judge.extract_claims(items)
            finally:
                await judge.aclose()

        extracted = asyncio.run(extract())
        asked: list[ChatRequest] = list(server.requests_log)
        stats = server.stats()
    assert all(e.error is None for e in extracted) and len(asked) == estimate.requests
    spent = judge.stats()
    assert spent.prompt_tokens == estimate.prompt_tokens != stats.billed_prompt_tokens
    replies = sum(judge.sizing.count_tokens(script(request)) for request in asked)
    assert spent.completion_tokens == replies
    assert any("came without its usage" in note and "estimates" in note for note in spent.notes)


class LoopingThenScripted:
    """Replies that repeat one 16-character piece (the fake server's piece) 150 times to the first ``first``
    requests: a model in a loop; the scripted judge answers the rest."""

    def __init__(self, first: int) -> None:
        self.script = ScriptedJudge()
        self.first = first
        self.looped = 0

    def __call__(self, request: ChatRequest) -> str:
        if self.looped < self.first:
            self.looped += 1
            return "0123456789abcdef" * 150
        return self.script(request)


def test_a_reply_that_repeats_itself_is_cut_and_asked_again_differently() -> None:
    rows = typical_rows(4, seed=6)
    responder = LoopingThenScripted(first=2)
    with FakeLLMServer(responder, capture=True) as server:
        judge = _judge(server, max_items_per_pack=4)
        extracted, verdicts = _run(judge, rows)
        bodies = [str(r.raw) for r in server.requests_log]
    assert responder.looped == 2
    assert len(set(bodies)) == len(bodies)  # never the same request again: halved, or with a repair message
    _all_scripted(rows, extracted, verdicts)
    assert any("came without its usage" in note for note in judge.stats().notes)  # the cut replies' own


@pytest.mark.parametrize(
    ("model", "api_base", "stream", "streams"),
    [
        ("openai/gpt-4o-mini", None, "auto", False),  # a vendor's model at its own API: litellm vouches for it
        ("openai/gpt-4o-mini", "http://127.0.0.1:9/v1", "auto", True),  # behind an api_base: a proxy, a server
        ("openai/a-local-model", None, "auto", True),  # a model litellm knows nothing of
        ("openai/a-local-model", "http://127.0.0.1:9/v1", "no", False),
        ("openai/gpt-4o-mini", None, "yes", True),
    ],
)
def test_auto_streams_where_litellm_cannot_vouch_for_the_endpoint(
    model: str, api_base: str | None, stream: str, streams: bool
) -> None:
    settings = JudgeSettings(model=model, api_base=api_base, stream=stream, context_window=8192)  # type: ignore[arg-type]
    assert model_card(CardSettings.of(settings), model).stream is streams
