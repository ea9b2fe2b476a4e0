"""A recording reverse proxy on 127.0.0.1 in front of a real OpenAI-compatible server (the self-hosted tier's
llama-server): every request passes through unchanged, and each chat completion's status, response format,
messages and the usage the server reported are kept, so a test or a benchmark can hold what the product
billed to what the server said, and count the requests a run sent. A streamed reply passes a piece at a time
as the server sends it (the judge times out on silence), and its usage is read from its events."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiohttp
from aiohttp import web

#: Headers a proxy must not copy: the hop's own framing and the address it was sent to.
_HOP = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"})


@dataclass(frozen=True)
class Call:
    """One chat completion as it crossed the proxy."""

    status: int
    response_format: str | None  # json_schema, json_object, or None (the prompt alone)
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int  # usage.prompt_tokens_details.cached_tokens: llama.cpp reports its prompt cache
    finish_reason: str | None
    error: str | None  # the server's error message, for a refused request
    messages: tuple[dict[str, Any], ...]  # what was sent, for counting its tokens our way


class Recorder:
    """Use as a context manager; ``base_url`` is the judge's ``--api-base``."""

    def __init__(self, upstream_root: str) -> None:
        self.upstream = upstream_root.rstrip("/")
        self.calls: list[Call] = []
        self.other_paths: list[str] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def chat_calls(self) -> list[Call]:
        with self._lock:
            return list(self.calls)

    def __enter__(self) -> Recorder:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _start(self) -> None:
        # No client timeout: the judge's own --timeout decides how long a request may take.
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with self._session.request(request.method, self.upstream + request.path_qs, data=body,
                                         headers=headers, allow_redirects=False) as reply:  # fmt: skip
            status = reply.status
            reply_headers = {k: v for k, v in reply.headers.items() if k.lower() not in _HOP}
            if reply.content_type == "text/event-stream":
                return await self._relay(request, reply, status, reply_headers, body)
            content = await reply.read()
        if request.path.endswith("/chat/completions"):
            self._record(status, body, content)
        else:
            with self._lock:
                self.other_paths.append(f"{request.method} {request.path}")
        return web.Response(status=status, body=content, headers=reply_headers)

    async def _relay(self, request: web.Request, reply: aiohttp.ClientResponse, status: int,
                     headers: dict[str, str], body: bytes) -> web.StreamResponse:
        """A streamed reply, passed on piece by piece; recorded from its events once it has ended (a reply the
        client left is recorded as far as it came: without its usage, it was billed nothing)."""
        relayed = web.StreamResponse(status=status, headers=headers)
        await relayed.prepare(request)
        seen = bytearray()
        try:
            async for piece in reply.content.iter_any():
                seen += piece
                await relayed.write(piece)
            await relayed.write_eof()
        finally:
            self._record(status, body, bytes(seen), streamed=True)
        return relayed

    def _record(self, status: int, body: bytes, content: bytes, streamed: bool = False) -> None:
        sent: dict[str, Any] = json.loads(body or b"{}")
        fmt = (sent.get("response_format") or {}).get("type")
        try:
            reply: dict[str, Any] = _from_events(content) if streamed else json.loads(content)
        except ValueError:
            reply = {}
        usage = reply.get("usage") or {}
        choices = reply.get("choices") or [{}]
        error = reply.get("error")
        call = Call(
            status=status,
            response_format=fmt,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            cached_tokens=int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0),
            finish_reason=choices[0].get("finish_reason"),
            error=(error.get("message") if isinstance(error, dict) else None),
            messages=tuple(sent.get("messages") or ()),
        )
        with self._lock:
            self.calls.append(call)


def _from_events(content: bytes) -> dict[str, Any]:
    """A streamed reply's events as the one completion they make up, as far as the recorder reads one: the
    finish_reason, the usage (its last event, when the client asked for it) and an error event's message."""
    finish: str | None = None
    whole: dict[str, Any] = {}
    for line in content.decode("utf-8", errors="replace").splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[len("data: "):])
        for choice in event.get("choices") or ():
            finish = choice.get("finish_reason") or finish
        for key in ("usage", "error"):
            if event.get(key):
                whole[key] = event[key]
    return {**whole, "choices": [{"finish_reason": finish}]}
