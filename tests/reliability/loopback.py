"""A chat-completions endpoint on 127.0.0.1 run by an aiohttp loop on a thread of its own: the frame the
suite's misbehaving servers (``hostile``, ``leaky``) share; each supplies only its ``_chat`` handler."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from aiohttp import web


class LoopbackServer:
    """``with Server(...) as server:`` serves ``_chat`` on ``server.base_url`` until the block ends."""

    #: extra ``web.AppRunner`` options of a subclass (how it shuts down, whether handlers are cancelled)
    runner_options: ClassVar[Mapping[str, Any]] = {}

    def __init__(self) -> None:
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError

    def __enter__(self) -> Self:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            loop.run_until_complete(self._start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup() if self._runner else asyncio.sleep(0))
            loop.close()

        self._thread = threading.Thread(target=run, name=type(self).__name__, daemon=True)
        self._thread.start()
        if not ready.wait(30):
            raise RuntimeError(f"{type(self).__name__} did not start within 30 s")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None, **self.runner_options)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
