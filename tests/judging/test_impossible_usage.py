"""Usage a provider should never send (issue 40): negative, fractional, astronomically large or not-a-number
token counts are refused before they are billed. Real HTTP through litellm: a small proxy in front of the fake
server rewrites each reply's ``usage``; the judge must bill its own count of those replies, never sum the
impossible value, count the refusals and name the first in its notes."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import polars as pl
import pytest

from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
from faithfulness_pipeline.judging.llm.replies import MAX_REPORTED_TOKENS, reported_tokens
from faithfulness_pipeline.judging.stack import JudgeStack
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge, typical_rows

KEY_ENV = "FP_TEST_USAGE_KEY"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-usage")


class UsageRewriter:
    """127.0.0.1 proxy to ``upstream`` whose chat replies carry ``usage`` instead of the server's."""

    def __init__(self, upstream: str, usage: dict[str, Any]) -> None:
        rewriter = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                forwarded = urllib.request.Request(upstream + self.path.removeprefix("/v1"), data=body, headers={
                    "Content-Type": "application/json", "Authorization": self.headers.get("Authorization", "")})  # fmt: skip
                try:
                    with urllib.request.urlopen(forwarded, timeout=30) as reply:
                        raw, kind = reply.read(), reply.headers.get("Content-Type", "")
                except urllib.error.HTTPError as refused:  # a probe of another kind of server: relayed as it is
                    self.send_error(refused.code)
                    return
                # allow_nan: NaN goes out as the bare token NaN, as a careless server's JSON encoder writes it
                if kind.startswith("text/event-stream"):
                    events = [json.loads(line[6:]) if line.startswith("data: {") else line
                              for line in raw.decode().split("\n")]  # fmt: skip
                    for event in events:
                        if isinstance(event, dict) and event.get("usage"):
                            event["usage"] = rewriter.usage
                    out = "\n".join(e if isinstance(e, str) else "data: " + json.dumps(e) for e in events).encode()
                else:
                    answer = json.loads(raw)
                    answer["usage"] = rewriter.usage
                    out = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.usage = usage
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def fake() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(ScriptedJudge()) as server:
        yield server


def _frame(n: int) -> pl.DataFrame:
    rows = typical_rows(n, seed=3)
    return pl.DataFrame({"conversation_id": [f"c{k}" for k in range(n)], "input": [r.question for r in rows],
                         "output": [r.answer for r in rows], "context": [list(r.context) for r in rows]})  # fmt: skip


def _score(base_url: str, stream: str = "no") -> tuple[pl.DataFrame, LiteLLMJudge]:
    inner = LiteLLMJudge(JudgeSettings(model="openai/fake-judge", api_base=base_url, api_key_env=KEY_ENV, stream=stream,
                                       timeout_s=10, backoff_base_s=0.01, backoff_max_s=0.05, max_items_per_pack=4))  # fmt: skip
    return score_frame(_frame(6), JudgeStack(inner, None), ScoringConfig(chunk_rows=100)), inner


BILLED = ["billed_prompt_tokens", "billed_completion_tokens", "billed_cached_prompt_tokens"]


@pytest.mark.parametrize("stream", ["no", "yes"])
@pytest.mark.parametrize(
    ("usage", "named"),
    [
        ({"prompt_tokens": -500, "completion_tokens": -7, "total_tokens": -507}, "prompt_tokens=-500"),
        ({"prompt_tokens": 10**18, "completion_tokens": 10**18, "total_tokens": 2 * 10**18}, "prompt_tokens=1000000000000000000"),
        ({"prompt_tokens": 40, "completion_tokens": -1, "total_tokens": 39}, "completion_tokens=-1"),
    ],
)  # fmt: skip
def test_impossible_usage_is_refused_counted_and_named_never_billed(
    fake: FakeLLMServer, usage: dict[str, Any], named: str, stream: str
) -> None:
    honest, _ = _score(fake.base_url, stream)
    proxy = UsageRewriter(fake.base_url.removesuffix("/v1"), usage)
    try:
        scored, judge = _score(proxy.base_url, stream)
    finally:
        proxy.close()
    assert scored.get_column("status").to_list() == ["ok"] * scored.height
    totals = scored.select(pl.col(BILLED).sum()).row(0, named=True)
    assert all(0 <= value <= MAX_REPORTED_TOKENS for value in totals.values()), totals
    assert scored.select(pl.col(BILLED).min()).row(0) >= (0, 0, 0)
    stats = judge.stats()
    assert stats.refused_usage == stats.requests > 0
    assert stats.prompt_tokens >= 0 and stats.completion_tokens >= 0 and (stats.cost_usd or 0) >= 0
    assert any(named in note and "not billed" in note for note in stats.notes), stats.notes
    # the scores are the honest run's: only what was billed could differ
    judged = ["conversation_id", "status", "claims", "verdicts", "hallucination_score", "faithfulness_score"]
    assert scored.select(judged).equals(honest.select(judged))


# litellm's own response objects warn when a float lands in an int field: the point of this test.
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
@pytest.mark.parametrize("stream", ["no", "yes"])
@pytest.mark.parametrize("count", [12.5, float("nan")])
def test_usage_that_is_not_a_whole_number_never_reaches_a_bill_or_a_row_as_a_traceback(
    fake: FakeLLMServer, count: float, stream: str
) -> None:
    proxy = UsageRewriter(fake.base_url.removesuffix("/v1"), {"prompt_tokens": count, "completion_tokens": 3})
    try:
        scored, judge = _score(proxy.base_url, stream)
    finally:
        proxy.close()
    # litellm itself refuses such a reply when it is not streamed (an error naming it, asked again); streamed,
    # the judge refuses the count and bills its own
    errors = scored.filter(pl.col("status") == "error").get_column("error").to_list()
    assert all("Traceback" not in e and "File \"" not in e for e in errors), errors[:1]
    totals = scored.select(pl.col(BILLED).sum()).row(0)
    assert all(v is not None and 0 <= v <= MAX_REPORTED_TOKENS for v in totals), totals
    stats = judge.stats()
    assert errors or (stats.refused_usage == stats.requests > 0 and any("not billed" in n for n in stats.notes))


@pytest.mark.parametrize(
    ("value", "expected"),
    [(12, (12, None)), (12.0, (12, None)), (0, (0, None)), (None, (None, None)), (True, (None, "n=True")),
     (-1, (None, "n=-1")), (float("nan"), (None, "n=nan")), (float("inf"), (None, "n=inf")), ("12", (None, "n=12")),
     (MAX_REPORTED_TOKENS + 1, (None, f"n={MAX_REPORTED_TOKENS + 1}"))],
)  # fmt: skip
def test_a_count_is_a_whole_number_within_any_window(value: object, expected: tuple[int | None, str | None]) -> None:
    assert reported_tokens({"n": value}, "n") == expected
