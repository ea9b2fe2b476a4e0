"""The OpenAI wire format both the chat endpoint (``chat.py``) and batch lines (``batches.py``) speak: the
request a responder sees, the completion and error bodies sent back, and the key faults and counts use.

Kept apart so that a batch line is parsed and answered exactly as a chat request is, without the batch
endpoints reaching into the chat endpoint's module.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class ChatRequest:
    """What a responder sees of one chat-completions request (``raw`` is the whole JSON body)."""

    model: str
    messages: list[dict[str, Any]]
    response_format: dict[str, Any] | None
    temperature: float | None
    seed: int | None
    max_tokens: int | None
    stream: bool
    raw: dict[str, Any]


#: Returns the assistant message content (usually JSON text) for one request.
Responder = Callable[[ChatRequest], str]


def echo_json(request: ChatRequest) -> str:
    """The trivial responder for smoke tests."""
    del request
    return '{"ok": true}'


def canonical_body(body: dict[str, Any]) -> bytes:
    """The body in a key-order-independent form: what fault decisions and body counts key on."""
    return json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def _usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:  # as OpenAI sends it: present (0 included) wherever caching applies
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return usage


@dataclass(frozen=True)
class Reply:
    """One answer of the "model", before it is sent as a completion, a stream or a batch line."""

    content: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    #: of prompt_tokens, served from the prompt cache; None when the server keeps none (no details sent)
    cached_tokens: int | None = None

    def usage(self) -> dict[str, Any]:
        return _usage(self.prompt_tokens, self.completion_tokens, self.cached_tokens)


#: Answers one parsed chat request with an outcome ("ok", "malformed", "partial"): the chat path's own.
ReplyMaker = Callable[[ChatRequest, str], Reply]


def error_body(message: str, kind: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def json_error(status: int, message: str, param: str | None = None, code: str | None = None) -> web.Response:
    """An ``invalid_request_error`` naming the parameter at fault, as the Files and Batches endpoints send."""
    body = error_body(message, "invalid_request_error", code)
    body["error"]["param"] = param
    return web.json_response(body, status=status)


def unauthorized(request: web.Request, api_key: str | None) -> web.Response | None:
    """The 401 for a request without the server's key (None: the key is right, or none is asked)."""
    if api_key is None or request.headers.get("Authorization") == f"Bearer {api_key}":
        return None
    body = error_body("Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
    return web.json_response(body, status=401)


def format_seconds(seconds: float) -> str:
    """A ``Retry-After`` value: whole seconds without a decimal point, as providers send them."""
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


def completion_body(completion_id: str, model: str, reply: Reply) -> dict[str, Any]:
    """A whole (not streamed) ``chat.completion`` object."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fakellm",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.content, "refusal": None},
                "logprobs": None,
                "finish_reason": reply.finish_reason,
            }
        ],
        "usage": reply.usage(),
    }


def _optional_number(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{key} must be a number")
    return float(value)


def _optional_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{key} must be an integer")
    return value


def parse_chat_request(body: Any) -> ChatRequest:
    """The request a responder sees; ValueError or TypeError for a body the endpoint answers with a 400."""
    if not isinstance(body, dict):
        raise TypeError("the body must be a JSON object")
    model, messages = body.get("model"), body.get("messages")
    if not isinstance(model, str) or not model:
        raise ValueError("model is required")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise ValueError("messages must be a list of objects")
    response_format = body.get("response_format")
    if response_format is not None and not isinstance(response_format, dict):
        raise TypeError("response_format must be an object")
    max_tokens = _optional_int(body, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = _optional_int(body, "max_tokens")
    return ChatRequest(
        model=model,
        messages=messages,
        response_format=response_format,
        temperature=_optional_number(body, "temperature"),
        seed=_optional_int(body, "seed"),
        max_tokens=max_tokens,
        stream=bool(body.get("stream", False)),
        raw=body,
    )
