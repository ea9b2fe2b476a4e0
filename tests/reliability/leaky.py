"""An OpenAI-compatible upstream that echoes the caller's API key in its errors, the worst a provider or
proxy can do: the key in 5xx bodies and headers, or a 401 that repeats the rejected key, in every form
(:func:`echoes`: whole, reversed, base64 at each alignment, hex, URL-encoded, a piece of it). Successful
replies come from the scripted judge, so runs still score rows.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from typing import Any
from urllib.parse import quote

from aiohttp import web

from faithfulness_pipeline.testing.fakellm.wire import ChatRequest
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.reliability.loopback import LoopbackServer


def echoes(key: str) -> list[str]:
    """The key as a careless provider repeats it. Each is short enough to survive a truncated message."""
    raw = key.encode()
    return [
        f"key {key}",
        f"reversed {key[::-1]}",
        f"auth {base64.b64encode(b'Bearer ' + raw).decode()}",  # three alignments of the key's bytes
        f"auth {base64.b64encode(b'Key ' + raw).decode()}",
        f"auth {base64.urlsafe_b64encode(b'Token: ' + raw).decode()}",
        f"hex {raw.hex()}",
        f"url {quote(key, safe='')}",
        f"key ending ...{key[-12:]}",
        f"key starting {key[:12]}...",
    ]


class LeakyServer(LoopbackServer):
    """``mode="flaky"``: the first request of a third of the bodies is a 500 that echoes the key, then
    the request succeeds; ``mode="broken"``: every request is a 500 that echoes the key, so the errors are
    kept; ``mode="reject"``: every request is a 401 that repeats the key it was given. Each failing
    request echoes the next form of :func:`echoes`, in its message and its headers."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.judge = ScriptedJudge()
        self.requests = 0
        self._seen: set[str] = set()
        self._bodies: dict[str, int] = {}

    async def _chat(self, request: web.Request) -> web.Response:
        self.requests += 1
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        body: dict[str, Any] = await request.json()
        echo = {"x-debug-authorization": f"Bearer {key}", "x-debug-key-b64": base64.b64encode(key.encode()).decode()}
        forms = echoes(key)
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        # The n-th distinct body echoes the n-th form on every attempt: whatever error a pack keeps, the
        # packs of a run keep every form between them.
        form = forms[self._bodies.setdefault(digest, len(self._bodies)) % len(forms)]
        if self.mode == "reject":
            message = f"Incorrect API key provided: {form}. Find your API key at https://example.invalid."
            return web.json_response(
                {"error": {"message": message, "type": "invalid_request_error", "code": "invalid_api_key"}},
                status=401,
                headers=echo,
            )
        if self.mode == "broken" or (int(digest, 16) % 3 == 0 and digest not in self._seen):
            self._seen.add(digest)
            message = f"upstream failure, {form}"
            return web.json_response({"error": {"message": message, "type": "server_error"}}, status=500, headers=echo)
        chat = ChatRequest(
            model=str(body["model"]),
            messages=list(body["messages"]),
            response_format=body.get("response_format"),
            temperature=body.get("temperature"),
            seed=body.get("seed"),
            max_tokens=body.get("max_tokens"),
            stream=False,
            raw=body,
        )
        content = self.judge(chat)
        return web.json_response(
            {
                "id": f"chatcmpl-leaky-{self.requests}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": chat.model,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
            }
        )
