"""Replies that are doomed or are not answers end a run in a few requests, each row saying what came back.

Real HTTP through litellm to a small misbehaving server on 127.0.0.1 (``hostile``): a used-up quota stops
the run like a refused key; a Retry-After longer than ``retry_after_max_s`` fails the requests it holds back
instead of sleeping; a proxy's HTML page counts toward the circuit breaker; a refusal or a reply without
choices is never sent again unchanged; a body trickling in a byte at a time is cut at ``--timeout`` (a
streamed one at ``--timeout`` of silence or ``--stream-max`` in all, a whole one to a streamed request at
``--timeout`` from its head); an error text that is not valid Unicode still gives a written table. The
server streams what is asked for as a stream (``--stream``: auto streams here, an endpoint behind an
api_base); the replies whose handling differs are tried both ways. Assertions count requests, not seconds,
but where time is the behaviour (a trickle held past its bound).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
from faithfulness_pipeline.judging.llm.requests import breaker_threshold
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.scripted import typical_frame
from tests.reliability import hostile as H

KEY_ENV = "FP_TEST_HOSTILE_KEY"
CONCURRENCY = 4


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-hostile")


def _judge(server: H.HostileServer, **extra: Any) -> LiteLLMJudge:
    values: dict[str, Any] = {
        "model": "openai/fake-judge", "api_base": server.base_url, "api_key_env": KEY_ENV, "timeout_s": 5.0,
        "backoff_base_s": 0.01, "backoff_max_s": 0.05, "max_concurrency": CONCURRENCY, "max_items_per_pack": 4,
    }
    values.update(extra)
    return LiteLLMJudge(JudgeSettings(**values))


def _score(judge: LiteLLMJudge, rows: int) -> tuple[pl.DataFrame, list[str]]:
    scored = score_frame(typical_frame(rows, seed=7), judge, ScoringConfig(chunk_rows=rows))
    return scored, judge.stats().notes


def _errors(scored: pl.DataFrame) -> list[str]:
    assert (scored.get_column("status") == "error").all()
    return [str(e) for e in scored.get_column("error").to_list()]


def test_a_used_up_quota_stops_the_run_at_once_like_a_refused_key() -> None:
    with H.HostileServer(lambda n, body: H.quota()) as server:
        scored, notes = _score(_judge(server), 60)
    # Only the requests already in flight when the first answer came back were sent.
    assert server.requests <= CONCURRENCY
    assert scored.height == 60
    for error in _errors(scored):
        assert "quota is used up (insufficient_quota" in error and "add credit" in error
    assert any("insufficient_quota" in n for n in notes)


@pytest.mark.parametrize(("retry_after", "setting"), [(86400.0, None), (3.0, 1.0)])
def test_a_retry_after_beyond_the_ceiling_fails_instead_of_sleeping(retry_after: float, setting: float | None) -> None:
    with H.HostileServer(lambda n, body: H.retry_after(retry_after)) as server:
        judge = _judge(server, retry_after_max_s=setting, backoff_max_s=0.05 if setting is None else 2.0)
        scored, notes = _score(judge, 60)
    assert server.requests <= CONCURRENCY  # the rest fail unsent while the provider holds them back
    ceiling = 0.05 if setting is None else setting
    for error in _errors(scored):
        assert f"Retry-After {retry_after:g} s, longer than the {ceiling:g} s waited out" in error
        assert "--retry-after-max" in error
    assert sum("Retry-After" in n for n in notes) == 1


def test_a_retry_after_within_the_ceiling_is_still_waited_out() -> None:
    def behave(n: int, body: dict[str, Any]) -> H.Answer:
        return H.retry_after(0.2) if n == 1 else H.scripted(body)

    with H.HostileServer(behave) as server:
        scored, _ = _score(_judge(server, max_concurrency=1, retry_after_max_s=1.0), 2)
    assert (scored.get_column("status") == "ok").all()
    assert server.requests >= 3  # the 429, then each step's request again


@pytest.mark.parametrize("stream", ["no", "yes"])
def test_an_html_page_with_status_200_trips_the_circuit_breaker_and_says_what_it_was(stream: str) -> None:
    with H.HostileServer(lambda n, body: H.login_page()) as server:
        scored, notes = _score(_judge(server, stream=stream), 200)
    assert server.requests <= breaker_threshold(CONCURRENCY) + CONCURRENCY
    errors = _errors(scored)
    assert all("HTML, not JSON: a proxy or a wrong --api-base?" in e for e in errors)
    assert all("circuit breaker" in e for e in errors)
    assert any("Sign in - Corporate Proxy" in n for n in notes)


@pytest.mark.parametrize("stream", ["no", "yes"])
@pytest.mark.parametrize("answer", [H.refusal, H.no_choices], ids=["refusal", "no_choices"])
def test_a_reply_without_an_answer_is_never_sent_again_unchanged(answer: Any, stream: str) -> None:
    with H.HostileServer(lambda n, body: answer()) as server:
        scored, _ = _score(_judge(server, stream=stream), 8)
    bodies = [json.dumps(b, sort_keys=True) for b in server.bodies]
    assert len(set(bodies)) == len(bodies), "a request was sent twice"
    # 8 answers in packs of 4: each pack is halved down to its items, and an item alone ends there.
    assert server.requests == 2 * (1 + 2 + 4)
    errors = _errors(scored)
    if answer is H.refusal and stream == "yes":
        # litellm passes no refusal on from a stream: the reply holds nothing, and the row says so
        assert all(e == "claim extraction failed: no answer: the reply's content is null" for e in errors)
    elif answer is H.refusal:
        assert all(e == f"claim extraction failed: the model refused: {H.REFUSAL}" for e in errors)
    else:
        assert all(e.startswith("claim extraction failed: no answer: the reply has no choices") for e in errors)


@pytest.mark.parametrize("stream", ["no", "yes"])
def test_a_body_that_trickles_in_is_cut_at_the_timeout(stream: str) -> None:
    # A byte every 10 ms: the body (over 300 bytes) takes seconds, each read a few ms; the timeout is one
    # second. A timeout of each read alone (or a loose backstop) would let the whole body through. Streamed,
    # a piece every few seconds is a reply still coming, but the trickle's first piece takes more than the
    # bound on the whole request, which cuts it first.
    bounds = {"timeout_s": 1.0} if stream == "no" else {"timeout_s": 30.0, "stream_max_s": 1.0}
    with H.HostileServer(lambda n, body: H.scripted(body, trickle_s=0.01)) as server:
        judge = _judge(server, max_retries=1, stream=stream, **bounds)
        scored, _ = _score(judge, 1)
    assert len(H.scripted(server.bodies[0]).body) > 300
    # Each request sent was cut short: none ran to the end of its body. (The server may see fewer: the
    # retry can wait behind the abandoned connection and time out before it reaches the handler.)
    assert judge.stats().requests == 2 and 1 <= server.cut_short == server.requests
    cut = ("timed out after 1 s" if stream == "no" else
           "timed out: a streamed reply took over 1 s in all, the wait for its first token included (--stream-max)")
    assert _errors(scored) == [f"claim extraction failed: gave up after 2 requests: {cut}"]


def test_a_whole_body_trickling_in_to_a_streamed_request_is_cut_at_the_timeout() -> None:
    """Issue 52: a server (or proxy) that ignores ``stream`` and trickles its whole JSON body, a byte every 0.25 s,
    is bounded by ``--timeout`` from its head, however long ``--stream-max`` is: the bug held each request for
    the whole body (over a minute here)."""
    with H.HostileServer(lambda n, body: H.scripted(body, trickle_s=0.25, whole=True)) as server:
        judge = _judge(server, max_retries=1, stream="yes", timeout_s=1.0)
        started = time.monotonic()
        scored, _ = _score(judge, 1)
        elapsed = time.monotonic() - started
    assert elapsed < 10, f"held for {elapsed:.0f} s"
    assert judge.stats().requests == 2 and server.bodies[0]["stream"] is True
    cut = "timed out: a reply that came whole took over 1 s to arrive after its head (--timeout)"
    assert _errors(scored) == [f"claim extraction failed: gave up after 2 requests: {cut}"]


def test_an_error_text_that_is_not_valid_unicode_still_gives_a_written_table(tmp_path: Path) -> None:
    with H.HostileServer(lambda n, body: H.error(500, "upstream broke \ud83d mid-emoji", "server_error", None)) as srv:
        scored, _ = _score(_judge(srv, max_retries=1), 3)
    assert all("upstream broke \ufffd mid-emoji" in e for e in _errors(scored))
    scored.write_parquet(tmp_path / "out.parquet")
    assert pl.read_parquet(tmp_path / "out.parquet").height == 3


def test_the_cli_stops_on_a_used_up_quota_after_the_requests_in_flight(tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    typical_frame(80, seed=2).write_parquet(src)
    out = tmp_path / "out.parquet"
    with H.HostileServer(lambda n, body: H.quota()) as server:
        done = subprocess.run(
            [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(src), "-o", str(out), "--model",
             "openai/fake-judge", "--api-base", server.base_url, "--api-key-env", KEY_ENV, "--max-concurrency",
             str(CONCURRENCY)],
            capture_output=True, text=True, timeout=300, check=False, env={**os.environ},
        )
    assert "Traceback" not in done.stderr, done.stderr
    assert server.requests <= CONCURRENCY
    assert "quota is used up" in done.stderr
    scored = pl.read_parquet(out)
    assert scored.height == 80 and (scored.get_column("status") == "error").all()


def _long_context_frame() -> pl.DataFrame:
    words = ["the", "river", "station", "company", "report", "shows", "revenue", "increased", "by", "twelve", "percent", "compared"]
    passages = [" ".join(words[(k + j) % len(words)] for j in range(300)) + "." for k in range(8)]
    return pl.DataFrame({"conversation_id": ["big"], "output": ["The river is long. Revenue grew."],
                         "context": [passages]})


def test_an_item_too_long_for_the_servers_window_alone_has_its_context_cut() -> None:
    frame = _long_context_frame()
    with H.HostileServer(H.too_long(6000, "verdict")) as server:
        judge = _judge(server)
        scored = score_frame(frame, judge, ScoringConfig())
    row = scored.row(0, named=True)
    assert row["status"] == "ok" and row["context_truncated"] is True
    assert server.requests <= 1 + 1 + judge.settings.max_retries  # extraction, then halving passages
    assert any("--context-window" in n and "context_truncated" in n for n in judge.stats().notes)


def test_an_answer_too_long_for_the_servers_window_is_an_error_naming_context_window() -> None:
    with H.HostileServer(H.too_long(10, "extract")) as server:
        scored = score_frame(_long_context_frame(), _judge(server), ScoringConfig())
    assert server.requests == 1
    (error,) = _errors(scored)
    assert "context window" in error and "--context-window" in error
