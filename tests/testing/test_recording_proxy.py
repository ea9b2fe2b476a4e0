"""The recording proxy of the self-hosted tier, in front of the fake server: whole and streamed replies pass
through unchanged, a streamed one a piece at a time as the server sends it, and each is recorded with the
usage the server reported."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from typing import Any

import pytest

from faithfulness_pipeline.core.port import ExtractItem
from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer, Latency
from faithfulness_pipeline.testing.recording_proxy import Recorder
from faithfulness_pipeline.testing.scripted import ScriptedJudge, typical_rows

KEY_ENV = "FP_TEST_PROXY_KEY"


@pytest.mark.parametrize("stream", ["no", "yes"])
def test_replies_pass_through_as_they_come_and_are_recorded_with_the_servers_usage(
    stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "none")
    rows = typical_rows(3, seed=1)
    items = [ExtractItem(f"r{k}", r.answer, r.question) for k, r in enumerate(rows)]
    heard: list[float] = []
    with FakeLLMServer(ScriptedJudge(), latency=Latency(per_output_token_s=0.02)) as server, \
            Recorder(server.base_url.removesuffix("/v1")) as proxy:
        settings: dict[str, Any] = {"model": "openai/fake-judge", "api_base": proxy.base_url, "api_key_env": KEY_ENV,
                                    "stream": stream, "timeout_s": 5}
        judge = LiteLLMJudge(JudgeSettings(**settings), receiving=lambda n: heard.append(time.monotonic()))

        async def extract() -> list[Any]:
            try:
                return await judge.extract_claims(items)
            finally:
                await judge.aclose()

        results = asyncio.run(extract())
        stats = server.stats()
        calls = proxy.chat_calls()
    assert [r.error for r in results] == [None] * len(rows)
    assert len(calls) == stats.requests == 1 and calls[0].status == 200 and calls[0].finish_reason == "stop"
    assert (calls[0].prompt_tokens, calls[0].completion_tokens) == (stats.billed_prompt_tokens,
                                                                    stats.billed_completion_tokens)
    assert (judge.stats().prompt_tokens, judge.stats().completion_tokens) == (calls[0].prompt_tokens,
                                                                              calls[0].completion_tokens)
    if stream == "yes":  # the pieces reached the judge over the reply's time, not all at its end
        assert len(heard) >= 3 and heard[-1] - heard[0] >= 0.3
    else:
        assert heard == []


def _post(url: str, body: dict[str, object]) -> bytes:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json",
                                                                                "Authorization": "Bearer x"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return bytes(reply.read())


def test_plain_and_streamed_replies_pass_through_and_their_usage_is_recorded() -> None:
    question = {"model": "m", "messages": [{"role": "user", "content": "Say something."}], "max_tokens": 20}
    with FakeLLMServer() as srv, Recorder(srv.base_url.removesuffix("/v1")) as proxy:
        direct = json.loads(_post(srv.base_url + "/chat/completions", question))
        plain = json.loads(_post(proxy.base_url + "/chat/completions", question))
        streamed = _post(proxy.base_url + "/chat/completions",
                         {**question, "stream": True, "stream_options": {"include_usage": True}})
    assert plain["choices"][0]["message"]["content"] == direct["choices"][0]["message"]["content"]
    events = [json.loads(line[5:]) for line in streamed.decode().splitlines()
              if line.startswith("data:") and line[5:].strip() != "[DONE]"]
    text = "".join(c["delta"].get("content") or "" for e in events for c in e.get("choices") or ())
    assert text == direct["choices"][0]["message"]["content"]
    calls = proxy.chat_calls()
    assert [c.status for c in calls] == [200, 200]
    usage = direct["usage"]
    assert [(c.prompt_tokens, c.completion_tokens) for c in calls] == [(usage["prompt_tokens"],
                                                                         usage["completion_tokens"])] * 2
    assert calls[1].finish_reason == direct["choices"][0]["finish_reason"]
