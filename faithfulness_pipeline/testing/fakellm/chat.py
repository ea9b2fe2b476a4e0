"""The chat-completions endpoint of the fake server (``POST /v1/chat/completions``, plain and SSE streaming).

It answers with content from a *responder*, counts tokens with the real cl100k BPE (``tokens.py``), models
latency with asyncio sleeps (no thread per request; a streamed reply comes a piece at a time, as slowly as
``Latency`` says), caps server-side concurrency (extra requests queue) and injects the faults of a
``FaultPlan`` (``faults.py``). With ``prompt_cache`` it reports the prompt tokens a provider's automatic
prefix cache would have served (off by default, so that exact billed figures stay what they were). Its
replies are made by :meth:`ChatService.make_reply`, which batch lines (``batches.py``) are answered by too.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from faithfulness_pipeline.testing.fakellm.faults import MALFORMED_CONTENT, FaultPlan, Latency
from faithfulness_pipeline.testing.fakellm.selfhosted import ServedLimits, refusal
from faithfulness_pipeline.testing.fakellm.streaming import stream_reply, trickle_whole
from faithfulness_pipeline.testing.fakellm.tokens import (
    PromptCache,
    count_prompt_tokens,
    count_tokens,
    prompt_token_ids,
    truncate_to_tokens,
)
from faithfulness_pipeline.testing.fakellm.wire import (
    ChatRequest,
    Reply,
    Responder,
    canonical_body,
    completion_body,
    error_body,
    format_seconds,
    parse_chat_request,
    unauthorized,
)


def _cut_in_middle(content: str, request: bytes) -> str:
    """``content`` cut in its middle third, where the request's bytes say: the same request is cut alike, another
    one (a retry that quotes a repair) elsewhere, as a flaky server's or proxy's cuts fall. Cut always at the
    middle, every retry of an item cut again would repeat one reply word for word, which a model does when it
    cannot do better (``judging.llm.tries.SAME_REPLIES``), not when a connection drops."""
    if len(content) <= 1:
        return ""
    third = max(1, len(content) // 3)
    at = third + int.from_bytes(hashlib.sha256(request).digest()[:4], "big") % third
    return content[: min(at, len(content) - 1)]


@dataclass
class _Counters:
    requests: int = 0
    by_outcome: collections.Counter[str] = field(default_factory=collections.Counter)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    max_in_flight_seen: int = 0
    max_open_seen: int = 0
    modelled_latency_s: float = 0.0
    served_latency_s: float = 0.0
    no_retry_after_429: int = 0
    billed_prompt_tokens: int = 0
    billed_completion_tokens: int = 0
    billed_cached_prompt_tokens: int = 0
    body_counts: dict[bytes, int] = field(default_factory=dict)



class ChatService:
    """The chat endpoint and what it counts; the server owns one, sets its settings and registers its routes.

    The settings are plain attributes the server's setters replace whole, from any thread: a request reads
    each once, where it needs it.
    """

    def __init__(
        self,
        responder: Responder,
        *,
        latency: Latency,
        faults: FaultPlan,
        api_key: str | None,
        capture: bool,
        limits: ServedLimits | None,
        refused: frozenset[str],
        prompt_cache: PromptCache | None,
        stream_usage: bool,
    ) -> None:
        self.responder = responder
        self.latency = latency
        self.faults = faults
        self.limits = limits
        self.refused = refused
        #: Off unless asked for: tests that assert exact billed figures know nothing of cached tokens.
        self.prompt_cache = prompt_cache
        #: Whether a streamed reply ends with its usage when the client asks (``stream_options.include_usage``);
        #: off plays a server or proxy that sends none.
        self.stream_usage = stream_usage
        self._api_key = api_key
        self._capture = capture
        self.requests_log: list[ChatRequest] = []
        self._lock = threading.Lock()
        self._counters = _Counters()
        self._open = 0
        self._in_flight = 0
        self._slot_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._handler_tasks: set[asyncio.Task[Any]] = set()
        self._id_seq = 0

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/v1/chat/completions", self._chat)
        router.add_post("/chat/completions", self._chat)

    async def shutdown(self, grace_s: float) -> None:
        """Cancels queued, sleeping and hung handlers, waiting at most ``grace_s`` for them to end."""
        tasks = [t for t in self._handler_tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)

    def counters(self) -> dict[str, Any]:
        """The chat fields of ``ServerStats``."""
        with self._lock:
            c = self._counters
            return {
                "requests": c.requests,
                "ok": c.by_outcome["ok"],
                "by_outcome": dict(c.by_outcome),
                "prompt_tokens": c.prompt_tokens,
                "completion_tokens": c.completion_tokens,
                "max_in_flight_seen": c.max_in_flight_seen,
                "bodies_seen": len(c.body_counts),
                "max_open_seen": c.max_open_seen,
                "modelled_latency_s": c.modelled_latency_s,
                "served_latency_s": c.served_latency_s,
                "in_flight": self._in_flight,
                "open_requests": self._open,
                "no_retry_after_429": c.no_retry_after_429,
                "billed_prompt_tokens": c.billed_prompt_tokens,
                "billed_completion_tokens": c.billed_completion_tokens,
                "billed_cached_prompt_tokens": c.billed_cached_prompt_tokens,
            }

    def reset(self) -> None:
        """Zeroes every counter, the per-body arrival counts (so faults repeat) and ``requests_log``."""
        with self._lock:
            self._counters = _Counters(max_in_flight_seen=self._in_flight, max_open_seen=self._open)
            self.requests_log.clear()

    # ------------------------------------------------------------------------------- concurrency

    @property
    def in_flight(self) -> int:
        """Requests being answered now (not those queued for a slot)."""
        with self._lock:
            return self._in_flight

    def fill_slots(self) -> None:
        """Lets queued requests in while the cap allows (call on the server's loop)."""
        cap = self.latency.max_in_flight
        while self._slot_waiters and (cap is None or self._in_flight < cap):
            waiter = self._slot_waiters.popleft()
            if waiter.done():  # its request was cancelled while queued
                continue
            self._take_slot()
            waiter.set_result(None)

    def _take_slot(self) -> None:
        with self._lock:
            self._in_flight += 1
            c = self._counters
            c.max_in_flight_seen = max(c.max_in_flight_seen, self._in_flight)

    def _release_slot(self) -> None:
        with self._lock:
            self._in_flight -= 1
        self.fill_slots()

    async def _acquire_slot(self) -> None:
        cap = self.latency.max_in_flight
        if not self._slot_waiters and (cap is None or self._in_flight < cap):
            self._take_slot()
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._slot_waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed a slot just as it was cancelled
                self._release_slot()
            raise

    # --------------------------------------------------------------------------------- endpoint

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        if task is not None:
            self._handler_tasks.add(task)
        with self._lock:
            self._counters.requests += 1
            self._open += 1
            self._counters.max_open_seen = max(self._counters.max_open_seen, self._open)
        try:
            return await self._chat_inner(request)
        finally:
            with self._lock:
                self._open -= 1
            if task is not None:
                self._handler_tasks.discard(task)

    def _record(self, outcome: str) -> None:
        with self._lock:
            self._counters.by_outcome[outcome] += 1

    async def _chat_inner(self, request: web.Request) -> web.StreamResponse:
        admitted = await self._admit(request)
        if isinstance(admitted, web.Response):
            return admitted
        chat, key, read_at = admitted
        with self._lock:
            nth = self._counters.body_counts.get(key, 0) + 1
            self._counters.body_counts[key] = nth
        faults = self.faults
        if faults.max_concurrent is not None:
            with self._lock:
                over = self._open > faults.max_concurrent  # this request is one of the open ones
            if over:
                return self._rate_limited(faults.retry_after_s)
        outcome = faults.decide(key, nth)
        self._id_seq += 1
        completion_id = f"chatcmpl-fake-{hashlib.sha256(key).hexdigest()[:12]}-{nth}-{self._id_seq}"

        if outcome in ("429", "429_no_retry_after"):
            return self._rate_limited(faults.retry_after_s if outcome == "429" else None)
        if outcome == "5xx":
            self._record("5xx")
            body_5xx = error_body("The server had an error while processing your request.", "server_error", None)
            return web.json_response(body_5xx, status=faults.status_5xx)
        if outcome == "hang" or (outcome == "stall" and not chat.stream):
            self._record(outcome)
            await asyncio.get_running_loop().create_future()  # only cancellation ends this
            raise AssertionError("unreachable")
        return await self._serve(request, chat, outcome, completion_id, read_at)

    async def _admit(self, request: web.Request) -> web.Response | tuple[ChatRequest, bytes, float]:
        """The 401 or 400 a request gets before any fault or queue, or (the request, its canonical body, when
        its body had been read)."""
        if (denied := unauthorized(request, self._api_key)) is not None:
            self._record("401")
            return denied
        try:
            body = await request.json()
            read_at = time.perf_counter()
            chat = parse_chat_request(body)
        except (ValueError, TypeError, KeyError) as exc:
            self._record("400")
            return web.json_response(error_body(f"invalid request: {exc}", "invalid_request_error", None), status=400)
        if self._capture:
            with self._lock:
                self.requests_log.append(chat)
        refused = self._self_hosted_refusal(chat)
        if refused is not None:
            return refused
        return chat, canonical_body(body), read_at

    async def _serve(
        self, request: web.Request, chat: ChatRequest, outcome: str, completion_id: str, read_at: float
    ) -> web.StreamResponse:
        """The reply of a request the faults let through ("ok", "malformed", "partial", "stall", "trickle"), once
        a slot is free, after its modelled service time."""
        queued_at = time.perf_counter()
        try:
            await self._acquire_slot()
        except asyncio.CancelledError:
            self._record("cancelled")
            raise
        queued_s = time.perf_counter() - queued_at
        try:
            try:
                reply = self.make_reply(chat, outcome)
            except Exception as exc:  # a broken responder is a test bug: make it loud, not a fault
                traceback.print_exc(file=sys.stderr)
                self._record("responder_error")
                return web.json_response(
                    error_body(f"responder raised {exc!r}", "server_error", "responder_error"), status=500
                )
            latency = self.latency
            service_s = latency.base_s + latency.per_output_token_s * reply.completion_tokens
            with self._lock:
                self._counters.modelled_latency_s += service_s
            # A stall and a trickle are counted as they start, like a hang: a client that gives up on them ends them.
            started = outcome in ("stall", "trickle")
            if started:
                self._record(outcome)
            trickle_s = self.faults.trickle_s if outcome == "trickle" else None
            try:
                if chat.stream:
                    asked = bool((chat.raw.get("stream_options") or {}).get("include_usage"))
                    response = await stream_reply(request, chat, reply, completion_id, stall=outcome == "stall",
                                                  latency=latency, include_usage=self.stream_usage and asked,
                                                  trickle_s=trickle_s)
                else:
                    if service_s > 0:
                        await asyncio.sleep(service_s)
                    body = completion_body(completion_id, chat.model, reply)
                    response = (web.json_response(body) if trickle_s is None else
                                await trickle_whole(request, 200, body, trickle_s))
            except (asyncio.CancelledError, ConnectionResetError):
                # The client left (or the server stops) before the reply went out (counted already if it started).
                if not started:
                    self._record("cancelled")
                raise
            with self._lock:  # for a streamed reply this includes writing its pieces
                self._counters.served_latency_s += time.perf_counter() - read_at - queued_s
            if started:  # a trickle the client read to its end: counted when it started, billed now
                self._bill(reply)
            else:
                self._record_reply(outcome, reply)
            return response
        finally:
            self._release_slot()

    def _self_hosted_refusal(self, chat: ChatRequest) -> web.Response | None:
        """The 400 a self-hosted server sends for a response format it does not take or a request over its
        window; None when it takes the request. Like those servers, it decides before any fault or queue."""
        message = refusal(chat.response_format, self.refused)
        if message is not None:
            self._record("format_refused")
            return web.json_response(error_body(message, "invalid_request_error", None), status=400)
        if self.limits is None:
            return None
        message = self.limits.over_window(count_prompt_tokens(chat.messages), chat.max_tokens)
        if message is None:
            return None
        self._record("context_exceeded")
        kind = "exceed_context_size_error" if self.limits.kind == "llama.cpp" else "BadRequestError"
        return web.json_response(error_body(message, kind, None), status=400)

    def _record_reply(self, outcome: str, reply: Reply) -> None:
        if outcome == "ok" and reply.finish_reason == "length":
            outcome = "max_tokens"
        with self._lock:
            c = self._counters
            c.by_outcome[outcome] += 1
            if outcome == "ok":
                c.prompt_tokens += reply.prompt_tokens
                c.completion_tokens += reply.completion_tokens
        self._bill(reply)

    def _bill(self, reply: Reply) -> None:
        with self._lock:
            c = self._counters
            c.billed_prompt_tokens += reply.prompt_tokens
            c.billed_completion_tokens += reply.completion_tokens
            c.billed_cached_prompt_tokens += reply.cached_tokens or 0

    def _rate_limited(self, retry_after_s: float | None) -> web.Response:
        headers: dict[str, str] = {}
        with self._lock:
            self._counters.by_outcome["429"] += 1
            if retry_after_s is None:
                self._counters.no_retry_after_429 += 1
        if retry_after_s is not None:
            headers["Retry-After"] = format_seconds(retry_after_s)
            headers["retry-after-ms"] = str(round(retry_after_s * 1000))
        body = error_body(
            "Rate limit reached for requests. Please try again later.", "requests", "rate_limit_exceeded"
        )
        return web.json_response(body, status=429, headers=headers)

    def make_reply(self, chat: ChatRequest, outcome: str) -> Reply:
        cache, cached = self.prompt_cache, None
        if cache is None:
            prompt_tokens = count_prompt_tokens(chat.messages)
        else:
            ids = prompt_token_ids(chat.messages)
            prompt_tokens, cached = len(ids), cache.served(ids)
        if outcome == "malformed":
            content, finish = MALFORMED_CONTENT, "stop"
        else:
            content = self.responder(chat)
            if not isinstance(content, str):
                raise TypeError(f"a responder must return str, not {type(content).__name__}")
            finish = "stop"
            if outcome == "partial":
                # Looks like a reply cut short by the output limit, which is how truncation shows up.
                content, finish = _cut_in_middle(content, canonical_body(chat.raw)), "length"
            else:
                cap = chat.max_tokens if self.limits is None else self.limits.cap(chat.max_tokens, prompt_tokens)
                if cap is not None and count_tokens(content) > cap:
                    content, finish = truncate_to_tokens(content, cap), "length"
        return Reply(content, finish, prompt_tokens, count_tokens(content), cached)
