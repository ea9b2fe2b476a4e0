"""An OpenAI-compatible endpoint on 127.0.0.1 that answers what real providers and proxies have answered:
a used-up quota, a daily limit's Retry-After, a proxy's HTML login page with status 200, a refusal, no
choices, a body that trickles in a byte at a time, an error whose text is not valid Unicode.

What each request gets is ``behave(n, body)`` (``n`` counts requests from 1); :func:`scripted` is the healthy
answer (the scripted judge's reply), so a test can mix healthy and hostile answers. A completion asked for
as a stream goes as one (:func:`streamed`), the way the provider that sent it would have streamed it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from aiohttp import web

from faithfulness_pipeline.testing.fakellm.wire import ChatRequest
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.reliability.loopback import LoopbackServer

LOGIN_PAGE = (
    "<!DOCTYPE html>\n<html><head><title>Sign in - Corporate Proxy</title></head>"
    "<body><form action='/login'><input name='user'><input type='password' name='pw'></form></body></html>\n"
)
QUOTA_MESSAGE = (
    "You exceeded your current quota, please check your plan and billing details. For more information on "
    "this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."
)
REFUSAL = "I'm sorry, but I can't help with that request."


@dataclass(frozen=True)
class Answer:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    trickle_s: float | None = None  # seconds between two bytes of the body, sent one at a time
    whole: bool = False  # sent whole even to a request asking for a stream (a server or proxy that ignores it)


def completion(message: dict[str, Any] | None, choices: list[Any] | None = None) -> Answer:
    body = {
        "id": "chatcmpl-hostile", "object": "chat.completion", "created": int(time.time()), "model": "fake-judge",
        "choices": choices if choices is not None else
        [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }
    return Answer(body=json.dumps(body).encode())


def error(status: int, message: str, kind: str, code: str | None, headers: dict[str, str] | None = None) -> Answer:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return Answer(status=status, body=json.dumps(body).encode(), headers=headers or {})


def quota() -> Answer:
    return error(429, QUOTA_MESSAGE, "insufficient_quota", "insufficient_quota")


def retry_after(seconds: float) -> Answer:
    return error(429, "Rate limit reached for requests per day (RPD).", "requests", "rate_limit_exceeded",
                 {"Retry-After": f"{seconds:g}"})


def login_page() -> Answer:
    return Answer(body=LOGIN_PAGE.encode(), content_type="text/html")


def refusal() -> Answer:
    return completion({"role": "assistant", "content": None, "refusal": REFUSAL})


def no_choices() -> Answer:
    return completion(None, choices=[])


_JUDGE = ScriptedJudge()


def scripted(body: dict[str, Any], *, trickle_s: float | None = None, whole: bool = False) -> Answer:
    chat = ChatRequest(model=str(body["model"]), messages=list(body["messages"]),
                       response_format=body.get("response_format"), temperature=body.get("temperature"),
                       seed=body.get("seed"), max_tokens=body.get("max_tokens"), stream=False, raw=body)
    answer = completion({"role": "assistant", "content": _JUDGE(chat)})
    return Answer(body=answer.body, trickle_s=trickle_s, whole=whole)


def streamed(answer: Answer, body: dict[str, Any]) -> Answer:
    """A 200 completion as OpenAI streams it: the role, the content (or the refusal) in pieces, the finish, then
    the usage when asked for; anything else (errors, web pages) as it is."""
    if not body.get("stream") or answer.status != 200 or answer.content_type != "application/json" or answer.whole:
        return answer
    whole = json.loads(answer.body)
    head = {"id": whole["id"], "object": "chat.completion.chunk", "created": whole["created"], "model": whole["model"]}
    events: list[dict[str, Any]] = []
    for choice in whole["choices"]:
        message = choice.get("message") or {}
        content, refusal = message.get("content"), message.get("refusal")
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": "" if content is not None else None,
                                         "refusal": None}]
        text, key = (content, "content") if content is not None else (refusal or "", "refusal")
        deltas += [{key: text[i : i + 16]} for i in range(0, len(text), 16)]
        events += [{**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
        events.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason")}]})
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append({**head, "choices": [], "usage": whole["usage"]})
    sse = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    return Answer(body=sse, content_type="text/event-stream", trickle_s=answer.trickle_s)


Behaviour = Callable[[int, dict[str, Any]], Answer]


class HostileServer(LoopbackServer):
    """``with HostileServer(behave) as server:``; ``server.requests`` counts the chat requests received."""

    runner_options: ClassVar[Mapping[str, Any]] = {"handler_cancellation": True, "shutdown_timeout": 0.2}

    def __init__(self, behave: Behaviour) -> None:
        super().__init__()
        self.behave = behave
        self.requests = 0
        self.bodies: list[dict[str, Any]] = []
        self.cut_short = 0  # trickled bodies the client hung up on before their last byte
        self._lock = threading.Lock()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body: dict[str, Any] = await request.json()
        with self._lock:
            self.requests += 1
            n = self.requests
            self.bodies.append(body)
        answer = streamed(self.behave(n, body), body)
        headers = {"Content-Type": answer.content_type, **answer.headers}
        if answer.trickle_s is None:
            return web.Response(status=answer.status, body=answer.body, headers=headers)
        response = web.StreamResponse(status=answer.status, headers=headers)
        response.content_length = len(answer.body)
        await response.prepare(request)
        sent = 0
        try:
            for k in range(len(answer.body)):
                await response.write(answer.body[k : k + 1])
                sent += 1
                await asyncio.sleep(answer.trickle_s)
            await response.write_eof()
        finally:
            if sent < len(answer.body):
                with self._lock:
                    self.cut_short += 1
        return response


def too_long(limit_chars: int, step: str) -> Behaviour:
    """Answers like a server whose window is smaller than the judge thinks: a 400 ``context_length_exceeded``
    for a request of ``step`` ("extract" or "verdict") whose data section is over ``limit_chars``; the scripted
    judge's reply otherwise."""
    def behave(n: int, body: dict[str, Any]) -> Answer:
        content = "".join(str(m.get("content")) for m in body["messages"] if m.get("role") == "user")
        data = content.split("<<<DATA>>>", 1)[-1]
        is_step = ('"sentences"' in data) == (step == "extract")
        if is_step and len(data) > limit_chars:
            return error(400, f"This model's maximum context length is 2048 tokens. However, your messages resulted "
                              f"in {len(data) // 3} tokens.", "invalid_request_error", "context_length_exceeded")
        return scripted(body)
    return behave
