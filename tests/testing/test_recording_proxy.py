"""The recording proxy of the real-server tier: replies pass through unchanged, streamed ones piece by piece, and
each chat completion's usage is recorded from a plain body or from a stream's events."""

from __future__ import annotations

import json
import urllib.request

from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.recording_proxy import Recorder


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
