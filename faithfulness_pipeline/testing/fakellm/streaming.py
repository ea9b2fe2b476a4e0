"""A chat reply as OpenAI streams it: server-sent events of ``chat.completion.chunk`` objects, paced by the
modelled latency, optionally ending with the usage, then ``[DONE]``; and any reply's bytes trickled out one at
a time (the ``trickle`` fault), streamed or whole.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Final

from aiohttp import web

from faithfulness_pipeline.testing.fakellm.faults import Latency
from faithfulness_pipeline.testing.fakellm.wire import ChatRequest, Reply

_STREAM_CHUNK_CHARS: Final = 16


def _sse(payload: dict[str, Any]) -> bytes:
    # Escaped: a reply may hold a lone surrogate (half an emoji), which has no UTF-8; its JSON escape is valid.
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _chunk(
    completion_id: str, created: int, model: str, choices: list[dict[str, Any]], usage: dict[str, Any]
) -> bytes:
    """One ``chat.completion.chunk`` event; ``usage`` is empty, or holds the one key "usage"."""
    payload: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": "fakellm",
        "choices": choices,
        **usage,
    }
    return _sse(payload)


async def stream_reply(
    request: web.Request,
    chat: ChatRequest,
    reply: Reply,
    completion_id: str,
    *,
    stall: bool,
    latency: Latency,
    include_usage: bool,
    trickle_s: float | None = None,
) -> web.StreamResponse:
    """The reply as server-sent events, a piece every ``per_output_token_s`` times its tokens; ``stall``:
    only its first half, then silence until the client leaves or the server stops. ``include_usage``: the
    client asked for the usage and the server sends it, in a last chunk. ``trickle_s``: every byte of it
    alone, that many seconds apart."""
    created = int(time.time())
    pieces = [
        reply.content[i : i + _STREAM_CHUNK_CHARS] for i in range(0, len(reply.content), _STREAM_CHUNK_CHARS)
    ]
    per_piece_s = (
        latency.per_output_token_s * reply.completion_tokens / len(pieces) if pieces else 0.0
    )

    # A null usage in every chunk but the last is how OpenAI streams when the usage was asked for.
    usage: dict[str, Any] = {"usage": None} if include_usage else {}

    def chunk(delta: dict[str, Any], finish_reason: str | None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return _chunk(completion_id, created, chat.model, [choice], usage)

    response = web.StreamResponse(
        status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    if latency.base_s > 0:  # time to first token
        await asyncio.sleep(latency.base_s)
    await response.prepare(request)

    async def send(data: bytes) -> None:
        if trickle_s is None:
            await response.write(data)
        else:
            await write_trickled(response, data, trickle_s)

    await send(chunk({"role": "assistant", "content": ""}, None))
    for k, piece in enumerate(pieces):
        if stall and k == len(pieces) // 2:
            await asyncio.get_running_loop().create_future()  # only cancellation ends this
        if latency.pause_s > 0 and k == len(pieces) // 2:
            await asyncio.sleep(latency.pause_s)
        if per_piece_s > 0:
            await asyncio.sleep(per_piece_s)
        await send(chunk({"content": piece}, None))
    await send(chunk({}, reply.finish_reason))
    if include_usage:
        await send(_chunk(completion_id, created, chat.model, [], {"usage": reply.usage()}))
    await send(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def write_trickled(response: web.StreamResponse, data: bytes, trickle_s: float) -> None:
    """``data`` a byte at a time, ``trickle_s`` apart: each write is one TCP segment, so the client's reads
    never wait long while the whole takes as long as the server likes."""
    for k in range(len(data)):
        await response.write(data[k : k + 1])
        await asyncio.sleep(trickle_s)


async def trickle_whole(request: web.Request, status: int, body: dict[str, Any], trickle_s: float
                        ) -> web.StreamResponse:
    """A whole JSON reply, its declared length first and then its bytes one at a time (``write_trickled``)."""
    data = json.dumps(body).encode()
    response = web.StreamResponse(status=status, headers={"Content-Type": "application/json"})
    response.content_length = len(data)
    await response.prepare(request)
    await write_trickled(response, data, trickle_s)
    await response.write_eof()
    return response
