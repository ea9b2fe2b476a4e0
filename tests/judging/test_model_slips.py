"""What a model gets wrong in its replies, and what it costs (issue 52, regressions 2 and 3): an evidence
pointer that names no passage keeps its verdict, and a model that never follows the reply format is found out
in a wave of requests, not in seven per answer.

Real HTTP through litellm to the fake server, whose responder plays the model's slip.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Sequence
from typing import Any

import pytest

from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.port import ExtractItem, ExtractResult, VerdictItem, VerdictResult
from faithfulness_pipeline.judging.llm.format_breaker import TRIP_ANSWERS, TRIP_REPLIES
from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import ChatRequest, FakeLLMServer, Latency
from faithfulness_pipeline.testing.scripted import ScriptedJudge, script_verdicts, typical_frame, typical_rows

KEY_ENV = "FP_TEST_SLIPS_KEY"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-slips")


def _judge(server: FakeLLMServer, **extra: Any) -> LiteLLMJudge:
    settings: dict[str, Any] = {"model": "openai/fake-judge", "api_base": server.base_url, "api_key_env": KEY_ENV,
                                "backoff_base_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 10.0, **extra}
    return LiteLLMJudge(JudgeSettings(**settings))


def _verdicts(judge: LiteLLMJudge, items: Sequence[VerdictItem]) -> list[VerdictResult]:
    async def main() -> list[VerdictResult]:
        try:
            return await judge.judge_claims(items)
        finally:
            await judge.aclose()

    return asyncio.run(main())


def _extract(judge: LiteLLMJudge, items: Sequence[ExtractItem]) -> list[ExtractResult]:
    async def main() -> list[ExtractResult]:
        try:
            return await judge.extract_claims(items)
        finally:
            await judge.aclose()

    return asyncio.run(main())


_POINTER = re.compile(r"^([SCUscu]\??)\d+")


class CountsPassagesFromOne:
    """The scripted judge's verdicts with every evidence pointer naming an item's last passage counted from 1
    (``S1`` for an item of one passage, ``S3`` for one of three): the slip Qwen2.5-Coder-1.5B made."""

    def __init__(self) -> None:
        self.script = ScriptedJudge()

    def __call__(self, request: ChatRequest) -> str:
        reply = json.loads(self.script(request))
        data = str(request.messages[-1]["content"]).split("<<<DATA>>>\n", 1)[1].split("\n<<<END DATA>>>", 1)[0]
        passages = {str(item["id"]): len(item.get("passages") or {}) for item in map(json.loads, data.splitlines())}
        if not all(isinstance(v, list) for v in reply.values()):
            return json.dumps(reply)  # an extraction reply: as the script wrote it
        return json.dumps({key: [_POINTER.sub(lambda m, n=passages[key]: f"{m.group(1)}{n}", code) for code in codes]
                           for key, codes in reply.items()}, ensure_ascii=False)


def test_a_model_counting_passages_from_one_keeps_every_verdict_and_asks_nothing_twice() -> None:
    rows = typical_rows(12, seed=8)
    # Half the items have one passage (issue 52's error rows: "evidence passage 1 does not exist (the item has
    # 1)"), half several, where a count from 1 cannot be told from a wrong number.
    items = [VerdictItem(f"r{k}", tuple(row.claims), tuple(row.context[:1]) if k % 2 == 0 else tuple(row.context))
             for k, row in enumerate(rows)]
    assert all(len(item.context) > 1 for item in items[1::2])
    with FakeLLMServer(CountsPassagesFromOne()) as server:
        judge = _judge(server, max_items_per_pack=1)  # one answer a request, as on a server of one's own
        verdicts = _verdicts(judge, items)
        requests = server.stats().requests
    assert requests == len(items) and judge.stats().retries == 0  # the slip was never asked about again
    for k, (item, result) in enumerate(zip(items, verdicts, strict=True)):
        assert result.error is None and result.verdicts is not None, result.error
        scripted = script_verdicts(list(item.claims))
        # The verdict, its speculative mark and its reason as the model gave them; the pointer read (the only
        # passage) or dropped, never guessed among several.
        assert [(v.verdict, v.speculative, v.reason) for v in result.verdicts] == [
            (verdict, spec, reason) for verdict, spec, _, reason in scripted]
        expected = [evidence if k % 2 == 0 else None for _, _, evidence, _ in scripted]
        assert [v.evidence for v in result.verdicts] == expected
    pointed = sum(1 for _, _, evidence, _ in (v for item in items for v in script_verdicts(list(item.claims)))
                  if evidence is not None)
    (note,) = [n for n in judge.stats().notes if "evidence pointers named no passage" in n]
    single = sum(1 for item in items[::2] for _, _, e, _ in script_verdicts(list(item.claims)) if e is not None)
    assert note.startswith(f"{pointed} evidence pointers named no passage of their item")
    assert f"{single} read as the item's only passage (the model counted from 1), {pointed - single} dropped" in note


SECRET = "sk-slips-3f9a7c21b8e04d6a"


class Garbage:
    """A model that never writes the format: prose, quoting the key it was sent (a secret in a reply must not
    reach the error rows); with ``first_usable``, the scripted judge answers the first request properly."""

    def __init__(self, first_usable: bool = False) -> None:
        self.script = ScriptedJudge()
        self.first_usable = first_usable
        self.seen = 0

    def __call__(self, request: ChatRequest) -> str:
        self.seen += 1
        if self.first_usable and self.seen == 1:
            return self.script(request)
        # Never twice the same (a reply repeated word for word ends an answer sooner: the last test here).
        return (f"Sure!\n\nHere is my assessment ({SECRET}): the statements look   mostly fine to me, thanks for "
                f"asking ({self.seen}).")


@pytest.mark.parametrize("per_pack", [1, 4])
def test_a_model_that_never_follows_the_format_is_stopped_after_a_wave_with_every_row_saying_so(
    monkeypatch: pytest.MonkeyPatch, per_pack: int
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    rows = 24
    with FakeLLMServer(Garbage()) as server:
        judge = _judge(server, max_concurrency=4, max_items_per_pack=per_pack)
        scored = score_frame(typical_frame(rows, seed=9), judge, ScoringConfig(chunk_rows=rows))
        requests = server.stats().requests
    # 8 unusable replies (no usable one) stop the run; the requests in flight then had been sent already (and
    # are given up). Every answer asked up to 7 times was 168 requests one answer a request, 138 in packs of 4.
    # (The judge counts a request given up as it left; the server may not have seen it arrive.)
    assert TRIP_REPLIES <= requests <= judge.stats().requests <= TRIP_REPLIES + 4 - 1
    assert scored.height == rows and (scored.get_column("status") == "error").all()
    # One line naming the model and quoting its last reply's start (one line, the key scrubbed), then the count.
    line = ("claim extraction failed: not scored: openai/fake-judge does not follow the reply format: its last reply "
            "began 'Sure! Here is my assessment ([REDACTED]): the statements look mostly fine to me,...' (none of its "
            "first 8 claims replies could be used; the last: the reply is not a JSON object")
    errors = scored.get_column("error").to_list()
    assert all(e.startswith(line) for e in errors), errors[0]
    assert not any(SECRET[:8] in e for e in errors)
    (note,) = [n for n in judge.stats().notes if "does not follow the reply format" in n]
    assert note.startswith(line.removeprefix("claim extraction failed: ")) and "no further request was sent" in note


def test_one_request_at_a_time_an_unproven_model_gets_two_repairs_an_answer_and_stops_at_four_answers(
) -> None:
    rows = typical_rows(6, seed=11)
    with FakeLLMServer(Garbage()) as server:
        judge = _judge(server, max_concurrency=1, max_items_per_pack=1)  # max_retries 6, the default
        extracted = _extract(judge, [ExtractItem(f"r{k}", r.answer, r.question) for k, r in enumerate(rows)])
        requests = server.stats().requests
    # Two answers under way at a time (one sent, one waiting for the slot): the first two take turns, three
    # requests each (the reply, then two repairs), then the next two answers' first replies make 8 unusable
    # replies over 4 answers. The last two answers are never sent. Before, each of the six was asked 7 times.
    assert TRIP_ANSWERS == 4 and requests == 3 + 3 + 1 + 1 == TRIP_REPLIES == judge.stats().requests
    errors = [e.error or "" for e in extracted]
    assert all(e.startswith("gave up after 3 requests: invalid reply: the reply is not a JSON") for e in errors[:2])
    assert all(e.startswith("not scored: openai/fake-judge does not follow the reply format") for e in errors[2:])
    assert [e.usage.llm_calls for e in extracted] == [3, 3, 1, 1, 0, 0]


def test_one_usable_reply_proves_the_model_follows_the_format_and_its_slips_are_retried_as_before() -> None:
    rows = typical_rows(3, seed=10)
    with FakeLLMServer(Garbage(first_usable=True)) as server:
        judge = _judge(server, max_concurrency=1, max_items_per_pack=1, max_retries=6)
        extracted = _extract(judge, [ExtractItem(f"r{k}", r.answer, r.question) for k, r in enumerate(rows)])
        requests = server.stats().requests
    assert extracted[0].error is None and extracted[0].claims == tuple(rows[0].claims)
    # Fourteen unusable replies in all, and no stop: one reply of the step was usable.
    assert requests == 1 + 2 * 7
    for result in extracted[1:]:
        assert result.error is not None and result.error.startswith("gave up after 7 requests: invalid reply")
    assert not any("does not follow the reply format" in n for n in judge.stats().notes)


class SlowGarbageAfter(Garbage):
    """Garbage, as long as its request lets it be (400 tokens at most) after the ``after``-th request."""

    def __init__(self, after: int) -> None:
        super().__init__()
        self.after = after

    def __call__(self, request: ChatRequest) -> str:
        text = super().__call__(request)
        return text if self.seen <= self.after else "Well, " * 400


def test_the_requests_in_flight_when_the_run_stops_are_given_up_not_waited_for() -> None:
    # The first eight replies are short garbage; the requests that arrive after them get long ones, still coming
    # when the eighth comes back: they are cut (the server sees the client leave), not read to their end.
    rows = typical_rows(16, seed=12)
    with FakeLLMServer(SlowGarbageAfter(TRIP_REPLIES), latency=Latency(per_output_token_s=0.05)) as server:
        judge = _judge(server, max_concurrency=4, max_items_per_pack=1)
        extracted = _extract(judge, [ExtractItem(f"r{k}", r.answer, r.question) for k, r in enumerate(rows)])
        deadline = time.monotonic() + 10
        while server.stats().open_requests and time.monotonic() < deadline:  # the server hears the client leave
            time.sleep(0.05)
        stats = server.stats()
    assert all(e.error is not None and "does not follow the reply format" in e.error for e in extracted)
    # Cut: the server saw the client leave (read to their end, they would be "ok" or "max_tokens").
    assert stats.requests > TRIP_REPLIES and stats.by_outcome.get("cancelled", 0) >= 1
    assert stats.by_outcome.get("max_tokens", 0) == 0


def test_an_answer_whose_model_gives_the_same_unusable_reply_three_times_is_not_asked_a_fourth() -> None:
    # Gemma 3 270M's way: for some answers it loops inside one claim until its reply is cut, and the repair message
    # quoting that reply gets the very same reply back, seven times over. The other answers are fine, so the
    # model has shown it can write the format: only the stubborn answer stops, at its third identical reply.
    rows = typical_rows(4, seed=13)
    stubborn = rows[0].answer[:12]
    looping = '{"a1":{"1":["' + "The museum is in Oslo.\\\",\\\"" * 60  # cut inside the claims' list
    script = ScriptedJudge()

    def responder(request: ChatRequest) -> str:
        return looping if stubborn in str(request.messages[1]["content"]) else script(request)

    with FakeLLMServer(responder) as server:
        judge = _judge(server, max_concurrency=1, max_items_per_pack=1)
        extracted = _extract(judge, [ExtractItem(f"r{k}", r.answer, r.question) for k, r in enumerate(rows)])
        requests = server.stats().requests
    assert [e.error is None for e in extracted] == [False, True, True, True]
    assert requests == 3 + 3  # three for the stubborn answer (not seven), one for each other
    assert (extracted[0].error or "").startswith("gave up after 3 requests: invalid reply: ")
    assert (extracted[0].error or "").endswith("(the same reply 3 times in a row)")
