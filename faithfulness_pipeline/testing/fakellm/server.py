"""The fake OpenAI-compatible server on 127.0.0.1 for tests and benchmarks: :class:`FakeLLMServer` runs, in a
thread of its own, the endpoints of what it imitates and adds up their counters (:class:`ServerStats`):

- ``chat.py``: chat completions (``POST /v1/chat/completions``, plain and streamed), with its latency and
  faults (``faults.py``), tokens counted and cached as OpenAI does (``tokens.py``);
- ``batches.py`` and ``files.py``: OpenAI's Files and Batches endpoints, answered by the same responder and
  faults;
- ``selfhosted.py``: what it does as a self-hosted server (its own window and output cap, published where
  llama.cpp, vLLM and Ollama publish theirs; response formats it refuses).

It never imports litellm (``tokens.py`` says how), so importing it stays cheap.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from faithfulness_pipeline.testing.fakellm.batches import BatchService
from faithfulness_pipeline.testing.fakellm.chat import ChatService
from faithfulness_pipeline.testing.fakellm.faults import BatchFaults, BatchTiming, FaultPlan, Latency
from faithfulness_pipeline.testing.fakellm.selfhosted import LimitProbes, ServedLimits, refused_formats
from faithfulness_pipeline.testing.fakellm.tokens import PromptCache, cl100k
from faithfulness_pipeline.testing.fakellm.wire import ChatRequest, Responder, echo_json


@dataclass(frozen=True)
class ServerStats:
    """A snapshot of the server's counters since start or the last ``reset_stats``."""

    requests: int  # every request received on the chat endpoint
    ok: int  # normal replies (outcome "ok")
    # "ok", "429", "5xx", "malformed", "partial", "hang", "stall", "trickle", "401", "400", "max_tokens",
    # "responder_error",
    # "format_refused" and "context_exceeded" (400s of a self-hosted server: ``selfhosted.py``),
    # "cancelled" (client left or server stopped while queued, sleeping or streaming). A reply is counted when
    # it is sent, a hang when it starts, a stall or a trickle when its reply starts: the values add up to
    # ``requests`` once no request is open.
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



_SHUTDOWN_GRACE_S: Final = 0.5
#: The defaults: no modelled latency, no faults (one shared instance of each, as they are immutable).
_NO_LATENCY: Final = Latency()
_NO_FAULTS: Final = FaultPlan()


class FakeLLMServer:
    """The fake server, run by an aiohttp loop in a background thread; use it as a context manager.

    ``base_url`` is ``http://127.0.0.1:<port>/v1``: with litellm, ``model="openai/<name>"`` and
    ``api_base=base_url``. All setters are safe to call from any thread while the server runs.
    """

    def __init__(
        self,
        responder: Responder = echo_json,
        *,
        latency: Latency = _NO_LATENCY,
        faults: FaultPlan = _NO_FAULTS,
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
        self._requested_port = port
        self._chat = ChatService(
            responder,
            latency=latency,
            faults=faults,
            api_key=api_key,
            capture=capture,
            limits=limits,
            refused=refused_formats(refuse_formats),
            prompt_cache=PromptCache() if prompt_cache else None,
            stream_usage=stream_usage,
        )
        self._probes = LimitProbes(lambda: self._chat.limits, lambda: self._chat.in_flight)
        #: GET and POST requests of the endpoints a client reads a server's limits from (``/props`` ...)
        self.probes_log: list[str] = self._probes.log
        self.requests_log: list[ChatRequest] = self._chat.requests_log
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None
        self._batches = BatchService(
            self._chat.make_reply,
            lambda: self._chat.faults,
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
        self._chat.add_routes(app.router)
        self._probes.add_routes(app.router)
        app.router.add_get("/health", self._health)
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
        await self._chat.shutdown(_SHUTDOWN_GRACE_S)
        await self._batches.shutdown()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------------------------------ settings

    def set_faults(self, faults: FaultPlan) -> None:
        self._chat.faults = faults

    def set_latency(self, latency: Latency) -> None:
        self._chat.latency = latency
        if self._loop is not None and self.running:
            # A raised cap must let queued requests in now, not at the next release.
            self._loop.call_soon_threadsafe(self._chat.fill_slots)

    def set_limits(self, limits: ServedLimits | None) -> None:
        """The self-hosted server's own limits (None: a server that tells none and enforces none)."""
        self._chat.limits = limits

    def set_refused_formats(self, formats: Collection[str]) -> None:
        """The ``response_format`` types answered with a 400 from now on ("json_schema", "json_object")."""
        self._chat.refused = refused_formats(formats)

    def set_prompt_cache(self, on: bool) -> None:
        """Reports cached prompt tokens (OpenAI's rule, :class:`PromptCache`) from now on, or stops; turning it
        on starts an empty cache."""
        self._chat.prompt_cache = PromptCache() if on else None

    def set_stream_usage(self, on: bool) -> None:
        """Whether streamed replies asked for their usage end with it, from now on."""
        self._chat.stream_usage = on

    def set_responder(self, responder: Responder) -> None:
        self._chat.responder = responder

    def set_batch_faults(self, faults: BatchFaults) -> None:
        """Batch ordinals and the create_429 count start again from here."""
        self._batches.set_faults(faults)

    def set_batch_timing(self, timing: BatchTiming) -> None:
        """Applies to phases begun after the call."""
        self._batches.set_timing(timing)

    def stats(self) -> ServerStats:
        batch_counters = dataclasses.asdict(self._batches.counters())
        return ServerStats(**self._chat.counters(), **batch_counters)

    def reset_stats(self) -> None:
        """Zeroes every counter, the per-body arrival counts (so faults repeat), ``requests_log`` and ``probes_log``.

        Batch ordinals (``BatchFaults``) start again at 1; stored files and batches stay.
        """
        self._chat.reset()
        self._probes.reset()
        self._batches.reset()

    async def _health(self, request: web.Request) -> web.Response:
        del request
        return web.json_response({"status": "ok"})

    async def _stats_endpoint(self, request: web.Request) -> web.Response:
        del request
        return web.json_response(stats_to_dict(self.stats()))


def stats_to_dict(stats: ServerStats) -> dict[str, Any]:
    return dataclasses.asdict(stats)
