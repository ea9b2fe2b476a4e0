"""An OpenAI-compatible chat-completions server on 127.0.0.1 for tests and benchmarks.

It answers ``POST /v1/chat/completions`` (plain and SSE streaming) with content from a *responder*,
counts tokens with the real cl100k BPE, models latency with asyncio sleeps (no thread per request; a
streamed reply comes a piece at a time, as slowly as ``Latency`` says), caps server-side concurrency (extra
requests queue) and injects faults (429, 5xx, malformed JSON, truncated JSON, hangs, streamed replies that
go silent halfway) chosen deterministically from the request body, so that runs are reproducible
whatever the arrival order and a retry of the same body can succeed. With ``prompt_cache`` it reports the
prompt tokens a provider's automatic prefix cache would have served (:class:`PromptCache`, OpenAI's rule;
off by default, so that exact billed figures stay what they were). OpenAI's Files and Batches endpoints,
answered by the same responder and faults, live in ``batches.py``; what it does as a self-hosted server
(its own window and output cap, response formats it refuses) in ``selfhosted.py``.

It never imports litellm: only the folder of litellm's bundled BPE files is looked up, so importing
this module stays cheap.
"""

from __future__ import annotations

import array
import asyncio
import collections
import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from faithfulness_pipeline.testing.fakellm.selfhosted import FORMATS, ServedLimits, refusal

if TYPE_CHECKING:
    import tiktoken

    from faithfulness_pipeline.testing.fakellm.batches import BatchFaults, BatchTiming


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


@dataclass(frozen=True)
class Latency:
    """Modelled service time: ``base_s + per_output_token_s * completion_tokens``, slept, never spun.

    ``max_in_flight`` caps how many requests the "model" works on at once; the rest wait in FIFO order
    (they are queued, not rejected), like a provider's server-side concurrency.
    """

    base_s: float = 0.0
    per_output_token_s: float = 0.0
    max_in_flight: int | None = None

    def __post_init__(self) -> None:
        if self.base_s < 0 or self.per_output_token_s < 0:
            raise ValueError("latencies must be >= 0")
        if self.max_in_flight is not None and self.max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1 or None")


#: Fault outcomes in the order their probability bands are laid on [0, 1).
_FAULT_ORDER: Final = ("429", "429_no_retry_after", "5xx", "malformed", "partial", "hang", "stall")


@dataclass(frozen=True)
class FaultPlan:
    """Probabilities of each fault; whatever is left over is a normal reply.

    The decision for a request is a pure function of ``(seed, canonical JSON body, n)`` where ``n`` counts
    how many times this exact body has been seen (1 for the first), so a retry of the same body can
    succeed and the same set of requests gets the same faults whatever their arrival order.
    """

    rate_429: float = 0.0
    retry_after_s: float | None = 1.0  # None -> 429 without a Retry-After header
    rate_429_no_retry_after: float = 0.0
    rate_5xx: float = 0.0
    rate_malformed: float = 0.0  # 200 whose content is not JSON at all
    rate_partial: float = 0.0  # 200 whose content is the responder's reply cut in the middle
    rate_hang: float = 0.0  # never answers, until the client goes away or the server stops
    #: A streamed reply whose first half is sent, then nothing, until the client goes away or the server stops
    #: (a server that died mid-generation with the connection still open). A plain request just hangs.
    rate_stall: float = 0.0
    seed: int = 0
    status_5xx: int = 500

    def __post_init__(self) -> None:
        rates = self._rates()
        if any(r < 0 or r > 1 for r in rates):
            raise ValueError("fault rates must lie in [0, 1]")
        if sum(rates) > 1 + 1e-9:
            raise ValueError(f"fault rates add up to {sum(rates)} > 1")
        if not 500 <= self.status_5xx <= 599:
            raise ValueError("status_5xx must be a 5xx status")
        if self.retry_after_s is not None and self.retry_after_s < 0:
            raise ValueError("retry_after_s must be >= 0 or None")

    def _rates(self) -> tuple[float, ...]:
        return (
            self.rate_429,
            self.rate_429_no_retry_after,
            self.rate_5xx,
            self.rate_malformed,
            self.rate_partial,
            self.rate_hang,
            self.rate_stall,
        )

    def decide(self, canonical_body: bytes, nth: int) -> str:
        """The outcome for the ``nth`` arrival of this body: "ok" or one of the fault names."""
        digest = hashlib.sha256(f"{self.seed}\x00{nth}\x00".encode() + canonical_body).digest()
        u = int.from_bytes(digest[:8], "big") / 2**64
        edge = 0.0
        for name, rate in zip(_FAULT_ORDER, self._rates(), strict=True):
            edge += rate
            if u < edge:
                return name
        return "ok"


@dataclass(frozen=True)
class ServerStats:
    """A snapshot of the server's counters since start or the last ``reset_stats``."""

    requests: int  # every request received on the chat endpoint
    ok: int  # normal replies (outcome "ok")
    # "ok", "429", "5xx", "malformed", "partial", "hang", "stall", "401", "400", "max_tokens", "responder_error",
    # "format_refused" and "context_exceeded" (400s of a self-hosted server: ``selfhosted.py``),
    # "cancelled" (client left or server stopped while queued, sleeping or streaming). A reply is counted when
    # it is sent, a hang when it starts, a stall when it goes silent: the values add up to ``requests`` once no
    # request is open.
    by_outcome: dict[str, int]
    prompt_tokens: int  # of ok replies sent
    completion_tokens: int  # of ok replies sent
    max_in_flight_seen: int  # most requests being worked on at once (bounded by Latency.max_in_flight)
    bodies_seen: int  # distinct request bodies
    max_open_seen: int = 0  # most chat requests open at once, queued ones included
    modelled_latency_s: float = 0.0  # sum of service times (base + per-token) of replies begun
    # Sum, over the same replies, of the time from the request's body having been read to its reply
    # being ready, less any wait for a slot: the modelled time plus the server's own work (parsing,
    # counting tokens, judging) and its event loop's delays, as the handler saw it. Reading the body
    # and writing the reply are not in it: they depend on the client too.
    served_latency_s: float = 0.0
    in_flight: int = 0  # being worked on right now
    open_requests: int = 0  # chat requests open right now: queued, in flight or hanging
    no_retry_after_429: int = 0  # the part of by_outcome["429"] sent without a Retry-After header
    # Tokens of every reply sent with a usage (ok, cut short, malformed): what a provider bills.
    billed_prompt_tokens: int = 0
    billed_completion_tokens: int = 0
    billed_cached_prompt_tokens: int = 0  # of billed_prompt_tokens, reported as cached (``prompt_cache``)
    # The Files and Batches endpoints (testing/fakellm/batches.py); batch lines are not chat requests.
    files_uploaded: int = 0
    file_content_downloads: int = 0  # litellm's retrieve of a completed batch downloads its output file too
    batches_created: int = 0
    batch_create_429: int = 0  # POST /v1/batches answered 429 by BatchFaults.create_429
    batch_lines: int = 0  # batch lines answered (200 or error); unanswered expired lines not included
    batch_billed_prompt_tokens: int = 0  # usage of every 200 batch line
    batch_billed_completion_tokens: int = 0
    batch_billed_cached_prompt_tokens: int = 0
    batches_by_status: dict[str, int] = field(default_factory=dict)  # batches created since the last reset


def canonical_body(body: dict[str, Any]) -> bytes:
    """The body in a key-order-independent form: what fault decisions and body counts key on."""
    return json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


# --------------------------------------------------------------------------------------------- tokens

_CL100K_URL: Final = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


def _bundled_bpe_dir() -> str | None:
    """litellm's folder of BPE files, found without importing litellm (its import costs seconds)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = os.path.join(location, "litellm_core_utils", "tokenizers")
        if os.path.isdir(candidate):
            return candidate
    return None


@functools.cache
def cl100k() -> tiktoken.Encoding:
    """The cl100k_base encoding, loaded from local files only (there is no network to download it)."""
    import tiktoken

    cache_file = hashlib.sha1(_CL100K_URL.encode()).hexdigest()
    current = os.environ.get("TIKTOKEN_CACHE_DIR")
    if not (current and os.path.isfile(os.path.join(current, cache_file))):
        bundled = _bundled_bpe_dir()
        if bundled is None or not os.path.isfile(os.path.join(bundled, cache_file)):
            raise RuntimeError("no local cl100k_base BPE file: litellm's bundled tokenizers were not found")
        # The same setting litellm makes on import, so both agree on where the files are.
        os.environ["TIKTOKEN_CACHE_DIR"] = bundled
    return tiktoken.get_encoding("cl100k_base")


def count_tokens(text: str) -> int:
    # Special-token text inside user content (prompt injection tests) is counted as plain text.
    return len(cl100k().encode(text, disallowed_special=()))


def _content_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [p.get("text", "") for p in value if isinstance(p, dict) and p.get("type") == "text"]
        return "".join(p for p in parts if isinstance(p, str))
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False)


def count_prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """Prompt tokens the way OpenAI bills chat models: 3 per message, 1 per name, 3 to prime the reply."""
    total = 3
    for message in messages:
        total += 3
        for key, value in message.items():
            total += count_tokens(_content_text(value))
            if key == "name":
                total += 1
    return total


#: Stand-ins for the chat format's tokens around messages (3 a message, 1 a name, 3 priming the reply):
#: outside cl100k's ids, so that they never equal a text token.
_FRAME_TOKEN: Final = -1
_NAME_TOKEN: Final = -2


def prompt_token_ids(messages: list[dict[str, Any]]) -> list[int]:
    """The prompt as a sequence of :func:`count_prompt_tokens` tokens, in order: what a prefix cache compares."""
    ids: list[int] = []
    for message in messages:
        ids += (_FRAME_TOKEN,) * 3
        for key, value in message.items():
            ids += cl100k().encode(_content_text(value), disallowed_special=())
            if key == "name":
                ids.append(_NAME_TOKEN)
    ids += (_FRAME_TOKEN,) * 3
    return ids


#: OpenAI's automatic prompt caching: a prompt that shares a prefix of 1,024 tokens or more with an earlier
#: one has that prefix served from the cache, counted in steps of 128 tokens.
PROMPT_CACHE_MIN_TOKENS: Final = 1024
PROMPT_CACHE_STEP_TOKENS: Final = 128


class PromptCache:
    """The prefixes of every prompt seen, at each :data:`PROMPT_CACHE_STEP_TOKENS` step from
    :data:`PROMPT_CACHE_MIN_TOKENS` on (as digests: a run's prompts would otherwise be held whole). It never
    evicts: a provider keeps a prefix minutes, a test or benchmark run lasts less."""

    def __init__(self) -> None:
        self._seen: set[bytes] = set()
        self._lock = threading.Lock()

    def served(self, ids: list[int]) -> int:
        """How many of ``ids``' first tokens an earlier prompt shared (0 below the minimum); then ``ids``'
        prefixes are remembered, so the next prompt can share them."""
        step, digest = PROMPT_CACHE_STEP_TOKENS, hashlib.blake2b(digest_size=16)
        prefixes: list[tuple[int, bytes]] = []
        for end in range(step, len(ids) + 1, step):
            digest.update(array.array("i", ids[end - step : end]).tobytes())
            if end >= PROMPT_CACHE_MIN_TOKENS:
                prefixes.append((end, digest.copy().digest()))
        with self._lock:
            # Every step of a prompt is remembered, so the shared steps are the leading ones.
            shared = 0
            for end, key in prefixes:
                if key not in self._seen:
                    break
                shared = end
            self._seen.update(key for _, key in prefixes)
        return shared


def truncate_to_tokens(text: str, limit: int) -> str:
    # Decoding a token prefix can split a multi-byte character (CJK, Hangul): drop the broken tail.
    tokens = cl100k().encode(text, disallowed_special=())
    return cl100k().decode_bytes(tokens[:limit]).decode("utf-8", errors="ignore")


# ------------------------------------------------------------------------------------------- replies

#: Not JSON, and without braces, so that lenient "find the JSON object" parsers fail too.
MALFORMED_CONTENT: Final = "Sure! Here is my assessment: the statements look mostly fine to me, thanks for asking."


def _cut_in_middle(content: str) -> str:
    if len(content) <= 1:
        return ""
    return content[: len(content) // 2]


def _usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:  # as OpenAI sends it: present (0 included) wherever caching applies
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return usage


def _error_body(message: str, kind: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _format_seconds(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


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


@dataclass(frozen=True)
class _Reply:
    content: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    #: of prompt_tokens, served from the prompt cache; None when the server keeps none (no details sent)
    cached_tokens: int | None = None

    def usage(self) -> dict[str, Any]:
        return _usage(self.prompt_tokens, self.completion_tokens, self.cached_tokens)


_STREAM_CHUNK_CHARS: Final = 16
_SHUTDOWN_GRACE_S: Final = 0.5


class FakeLLMServer:
    """The fake server, run by an aiohttp loop in a background thread; use it as a context manager.

    ``base_url`` is ``http://127.0.0.1:<port>/v1``: with litellm, ``model="openai/<name>"`` and
    ``api_base=base_url``. All setters are safe to call from any thread while the server runs.
    """

    def __init__(
        self,
        responder: Responder = echo_json,
        *,
        latency: Latency = Latency(),
        faults: FaultPlan = FaultPlan(),
        port: int = 0,
        api_key: str | None = None,
        capture: bool = False,
        batch_timing: BatchTiming | None = None,
        batch_faults: BatchFaults | None = None,
        limits: ServedLimits | None = None,
        refuse_formats: Collection[str] = (),
        prompt_cache: bool = False,
        stream_usage: bool = True,
    ) -> None:
        # Imported here: batches.py builds on this module.
        from faithfulness_pipeline.testing.fakellm.batches import BatchFaults, BatchService, BatchTiming

        self._responder = responder
        self._latency = latency
        self._faults = faults
        self._requested_port = port
        self._api_key = api_key
        self._capture = capture
        self._limits = limits
        self._refused = _formats(refuse_formats)
        #: Off unless asked for: tests that assert exact billed figures know nothing of cached tokens.
        self._prompt_cache = PromptCache() if prompt_cache else None
        #: Whether a streamed reply ends with its usage when the client asks (``stream_options.include_usage``);
        #: off plays a server or proxy that sends none.
        self._stream_usage = stream_usage
        #: GET and POST requests of the endpoints a client reads a server's limits from (``/props`` ...)
        self.probes_log: list[str] = []
        self.requests_log: list[ChatRequest] = []
        self._lock = threading.Lock()
        self._counters = _Counters()
        self._open = 0
        self._in_flight = 0
        self._slot_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._handler_tasks: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None
        self._id_seq = 0
        self._batches = BatchService(
            self._make_reply,
            lambda: self._faults,
            api_key=api_key,
            timing=batch_timing or BatchTiming(),
            faults=batch_faults or BatchFaults(),
        )
        cl100k()  # fail at construction, not on the first request, when no tokenizer files exist

    # ----------------------------------------------------------------------------------- lifecycle

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the server is not running")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeLLMServer:
        if self._thread is not None:
            raise RuntimeError("already started")
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._run_loop, args=(ready, failure), name="fakellm", daemon=True
        )
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        """Cancels queued, sleeping and hung handlers, then closes the listener and every connection."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        if thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
        self._thread = None
        self._port = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run_loop(self, ready: threading.Event, failure: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._startup())
        except BaseException as exc:  # reported to start() in the caller's thread
            failure.append(exc)
            ready.set()
            loop.close()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _startup(self) -> None:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/props", self._props)
        app.router.add_post("/api/show", self._show)
        app.router.add_get("/fakellm/stats", self._stats_endpoint)
        self._batches.add_routes(app.router)
        # handler_cancellation: a client that gives up (timeout) ends its hung or queued handler.
        runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=_SHUTDOWN_GRACE_S
        )
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self._requested_port, backlog=1024)
        await site.start()
        self._runner = runner
        self._port = int(runner.addresses[0][1])

    async def _shutdown(self) -> None:
        tasks = [t for t in self._handler_tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=_SHUTDOWN_GRACE_S)
        await self._batches.shutdown()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------------------------------ settings

    def set_faults(self, faults: FaultPlan) -> None:
        self._faults = faults

    def set_latency(self, latency: Latency) -> None:
        self._latency = latency
        if self._loop is not None and self.running:
            # A raised cap must let queued requests in now, not at the next release.
            self._loop.call_soon_threadsafe(self._fill_slots)

    def set_limits(self, limits: ServedLimits | None) -> None:
        """The self-hosted server's own limits (None: a server that tells none and enforces none)."""
        self._limits = limits

    def set_refused_formats(self, formats: Collection[str]) -> None:
        """The ``response_format`` types answered with a 400 from now on ("json_schema", "json_object")."""
        self._refused = _formats(formats)

    def set_prompt_cache(self, on: bool) -> None:
        """Reports cached prompt tokens (OpenAI's rule, :class:`PromptCache`) from now on, or stops; turning it
        on starts an empty cache."""
        self._prompt_cache = PromptCache() if on else None

    def set_stream_usage(self, on: bool) -> None:
        """Whether streamed replies asked for their usage end with it, from now on."""
        self._stream_usage = on

    def set_responder(self, responder: Responder) -> None:
        self._responder = responder

    def set_batch_faults(self, faults: BatchFaults) -> None:
        """Batch ordinals and the create_429 count start again from here."""
        self._batches.set_faults(faults)

    def set_batch_timing(self, timing: BatchTiming) -> None:
        """Applies to phases begun after the call."""
        self._batches.set_timing(timing)

    def stats(self) -> ServerStats:
        batch_counters = dataclasses.asdict(self._batches.counters())
        with self._lock:
            c = self._counters
            return ServerStats(
                requests=c.requests,
                ok=c.by_outcome["ok"],
                by_outcome=dict(c.by_outcome),
                prompt_tokens=c.prompt_tokens,
                completion_tokens=c.completion_tokens,
                max_in_flight_seen=c.max_in_flight_seen,
                bodies_seen=len(c.body_counts),
                max_open_seen=c.max_open_seen,
                modelled_latency_s=c.modelled_latency_s,
                served_latency_s=c.served_latency_s,
                in_flight=self._in_flight,
                open_requests=self._open,
                no_retry_after_429=c.no_retry_after_429,
                billed_prompt_tokens=c.billed_prompt_tokens,
                billed_completion_tokens=c.billed_completion_tokens,
                billed_cached_prompt_tokens=c.billed_cached_prompt_tokens,
                **batch_counters,
            )

    def reset_stats(self) -> None:
        """Zeroes every counter, the per-body arrival counts (so faults repeat), ``requests_log`` and ``probes_log``.

        Batch ordinals (``BatchFaults``) start again at 1; stored files and batches stay.
        """
        with self._lock:
            self._counters = _Counters(max_in_flight_seen=self._in_flight, max_open_seen=self._open)
            self.requests_log.clear()
            self.probes_log.clear()
        self._batches.reset()

    # ------------------------------------------------------------------------------- concurrency

    def _fill_slots(self) -> None:
        cap = self._latency.max_in_flight
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
        self._fill_slots()

    async def _acquire_slot(self) -> None:
        cap = self._latency.max_in_flight
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

    # -------------------------------------------------------------------------------- endpoints

    async def _health(self, request: web.Request) -> web.Response:
        del request
        return web.json_response({"status": "ok"})

    async def _models(self, request: web.Request) -> web.Response:
        self._probed(request)
        extra = self._limits.models_entry() if self._limits is not None else {}
        data = [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "fakellm", **extra}]
        return web.json_response({"object": "list", "data": data})

    def _probed(self, request: web.Request) -> None:
        with self._lock:
            self.probes_log.append(f"{request.method} {request.path}")

    async def _props(self, request: web.Request) -> web.Response:
        self._probed(request)
        limits = self._limits
        if limits is None or limits.kind != "llama.cpp":
            return web.json_response(_error_body("File Not Found", "not_found_error", None), status=404)
        return web.json_response(limits.props("fake-model"))

    async def _show(self, request: web.Request) -> web.Response:
        self._probed(request)
        limits = self._limits
        if limits is None or limits.kind != "ollama":
            return web.Response(status=404, text="404 page not found")
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": "invalid JSON"}, status=400)
        name = body.get("model") if isinstance(body, dict) else None
        if not isinstance(name, str) or not name:
            return web.json_response({"error": "model is required"}, status=400)
        return web.json_response(limits.show(name))

    async def _stats_endpoint(self, request: web.Request) -> web.Response:
        del request
        return web.json_response(stats_to_dict(self.stats()))

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
        if self._api_key is not None and request.headers.get("Authorization") != f"Bearer {self._api_key}":
            self._record("401")
            body = _error_body("Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
            return web.json_response(body, status=401)
        try:
            body = await request.json()
            read_at = time.perf_counter()
            chat = _parse_chat_request(body)
        except (ValueError, TypeError, KeyError) as exc:
            self._record("400")
            return web.json_response(
                _error_body(f"invalid request: {exc}", "invalid_request_error", None), status=400
            )
        if self._capture:
            with self._lock:
                self.requests_log.append(chat)
        refused = self._self_hosted_refusal(chat)
        if refused is not None:
            return refused
        key = canonical_body(body)
        with self._lock:
            nth = self._counters.body_counts.get(key, 0) + 1
            self._counters.body_counts[key] = nth
        faults = self._faults
        outcome = faults.decide(key, nth)
        self._id_seq += 1
        completion_id = f"chatcmpl-fake-{hashlib.sha256(key).hexdigest()[:12]}-{nth}-{self._id_seq}"

        if outcome in ("429", "429_no_retry_after"):
            return self._rate_limited(faults.retry_after_s if outcome == "429" else None)
        if outcome == "5xx":
            self._record("5xx")
            body_5xx = _error_body("The server had an error while processing your request.", "server_error", None)
            return web.json_response(body_5xx, status=faults.status_5xx)
        if outcome == "hang" or (outcome == "stall" and not chat.stream):
            self._record(outcome)
            await asyncio.get_running_loop().create_future()  # only cancellation ends this
            raise AssertionError("unreachable")

        queued_at = time.perf_counter()
        try:
            await self._acquire_slot()
        except asyncio.CancelledError:
            self._record("cancelled")
            raise
        queued_s = time.perf_counter() - queued_at
        try:
            try:
                reply = self._make_reply(chat, outcome)
            except Exception as exc:  # a broken responder is a test bug: make it loud, not a fault
                traceback.print_exc(file=sys.stderr)
                self._record("responder_error")
                return web.json_response(
                    _error_body(f"responder raised {exc!r}", "server_error", "responder_error"), status=500
                )
            latency = self._latency
            service_s = latency.base_s + latency.per_output_token_s * reply.completion_tokens
            with self._lock:
                self._counters.modelled_latency_s += service_s
            try:
                if chat.stream:
                    stall = outcome == "stall"
                    if stall:  # counted as it starts, like a hang: only the client's leaving ends it
                        self._record("stall")
                    response = await self._stream(request, chat, reply, completion_id, stall)
                else:
                    if service_s > 0:
                        await asyncio.sleep(service_s)
                    response = web.json_response(_completion(completion_id, chat.model, reply))
            except (asyncio.CancelledError, ConnectionResetError):
                # The client left (or the server stops) before the reply went out (a stall is counted already).
                if outcome != "stall":
                    self._record("cancelled")
                raise
            with self._lock:  # for a streamed reply this includes writing its pieces
                self._counters.served_latency_s += time.perf_counter() - read_at - queued_s
            self._record_reply(outcome, reply)
            return response
        finally:
            self._release_slot()

    def _self_hosted_refusal(self, chat: ChatRequest) -> web.Response | None:
        """The 400 a self-hosted server sends for a response format it does not take or a request over its
        window; None when it takes the request. Like those servers, it decides before any fault or queue."""
        message = refusal(chat.response_format, self._refused)
        if message is not None:
            self._record("format_refused")
            return web.json_response(_error_body(message, "invalid_request_error", None), status=400)
        if self._limits is None:
            return None
        message = self._limits.over_window(count_prompt_tokens(chat.messages), chat.max_tokens)
        if message is None:
            return None
        self._record("context_exceeded")
        kind = "exceed_context_size_error" if self._limits.kind == "llama.cpp" else "BadRequestError"
        return web.json_response(_error_body(message, kind, None), status=400)

    def _record_reply(self, outcome: str, reply: _Reply) -> None:
        if outcome == "ok" and reply.finish_reason == "length":
            outcome = "max_tokens"
        with self._lock:
            c = self._counters
            c.by_outcome[outcome] += 1
            c.billed_prompt_tokens += reply.prompt_tokens
            c.billed_completion_tokens += reply.completion_tokens
            c.billed_cached_prompt_tokens += reply.cached_tokens or 0
            if outcome == "ok":
                c.prompt_tokens += reply.prompt_tokens
                c.completion_tokens += reply.completion_tokens

    def _rate_limited(self, retry_after_s: float | None) -> web.Response:
        headers: dict[str, str] = {}
        with self._lock:
            self._counters.by_outcome["429"] += 1
            if retry_after_s is None:
                self._counters.no_retry_after_429 += 1
        if retry_after_s is not None:
            headers["Retry-After"] = _format_seconds(retry_after_s)
            headers["retry-after-ms"] = str(round(retry_after_s * 1000))
        body = _error_body(
            "Rate limit reached for requests. Please try again later.", "requests", "rate_limit_exceeded"
        )
        return web.json_response(body, status=429, headers=headers)

    def _make_reply(self, chat: ChatRequest, outcome: str) -> _Reply:
        cache, cached = self._prompt_cache, None
        if cache is None:
            prompt_tokens = count_prompt_tokens(chat.messages)
        else:
            ids = prompt_token_ids(chat.messages)
            prompt_tokens, cached = len(ids), cache.served(ids)
        if outcome == "malformed":
            content, finish = MALFORMED_CONTENT, "stop"
        else:
            content = self._responder(chat)
            if not isinstance(content, str):
                raise TypeError(f"a responder must return str, not {type(content).__name__}")
            finish = "stop"
            if outcome == "partial":
                # Looks like a reply cut short by the output limit, which is how truncation shows up.
                content, finish = _cut_in_middle(content), "length"
            else:
                cap = chat.max_tokens if self._limits is None else self._limits.cap(chat.max_tokens, prompt_tokens)
                if cap is not None and count_tokens(content) > cap:
                    content, finish = truncate_to_tokens(content, cap), "length"
        return _Reply(content, finish, prompt_tokens, count_tokens(content), cached)

    async def _stream(
        self, request: web.Request, chat: ChatRequest, reply: _Reply, completion_id: str, stall: bool
    ) -> web.StreamResponse:
        """The reply as server-sent events, a piece every ``per_output_token_s`` times its tokens; ``stall``:
        only its first half, then silence until the client leaves or the server stops."""
        include_usage = self._stream_usage and bool((chat.raw.get("stream_options") or {}).get("include_usage"))
        created = int(time.time())
        pieces = [
            reply.content[i : i + _STREAM_CHUNK_CHARS] for i in range(0, len(reply.content), _STREAM_CHUNK_CHARS)
        ]
        latency = self._latency
        per_piece_s = (
            latency.per_output_token_s * reply.completion_tokens / len(pieces) if pieces else 0.0
        )

        def chunk(delta: dict[str, Any], finish_reason: str | None) -> bytes:
            payload: dict[str, Any] = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": chat.model,
                "system_fingerprint": "fakellm",
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
            }
            if include_usage:
                payload["usage"] = None
            return _sse(payload)

        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        if latency.base_s > 0:  # time to first token
            await asyncio.sleep(latency.base_s)
        await response.prepare(request)
        await response.write(chunk({"role": "assistant", "content": ""}, None))
        for k, piece in enumerate(pieces):
            if stall and k == len(pieces) // 2:
                await asyncio.get_running_loop().create_future()  # only cancellation ends this
            if per_piece_s > 0:
                await asyncio.sleep(per_piece_s)
            await response.write(chunk({"content": piece}, None))
        await response.write(chunk({}, reply.finish_reason))
        if include_usage:
            await response.write(
                _sse(
                    {
                        "id": completion_id,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": chat.model,
                        "system_fingerprint": "fakellm",
                        "choices": [],
                        "usage": reply.usage(),
                    }
                )
            )
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _sse(payload: dict[str, Any]) -> bytes:
    # Escaped: a reply may hold a lone surrogate (half an emoji), which has no UTF-8; its JSON escape is valid.
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _completion(completion_id: str, model: str, reply: _Reply) -> dict[str, Any]:
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


def _parse_chat_request(body: Any) -> ChatRequest:
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


def _formats(formats: Collection[str]) -> frozenset[str]:
    chosen = frozenset(formats)
    if not chosen <= set(FORMATS):
        raise ValueError(f"refuse_formats must be among {FORMATS}, got {sorted(chosen)}")
    return chosen


def stats_to_dict(stats: ServerStats) -> dict[str, Any]:
    return dataclasses.asdict(stats)
