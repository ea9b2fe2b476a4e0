"""Which structured output the judge's endpoint takes, learnt from the endpoint itself, once per run.

A self-hosted server (llama.cpp, vLLM, Ollama, LM Studio, ...) is unknown to litellm's model map, so
litellm cannot say whether it takes a JSON schema; most do (llama.cpp turns it into a grammar), and a reply
held to the schema is what small local models need most. So on such an endpoint the judge starts with the
schema (``response_format`` json_schema) and steps down when the endpoint refuses it with a 400 naming the
format: to JSON mode (json_object), then to the JSON asked in the prompt alone. The step holds for the rest
of the run, for every request: :class:`OutputMode` is shared by all of them.

Until a reply has shown that the endpoint takes the current format, one request at a time is sent with it
(:meth:`OutputMode.trial`): a refusing endpoint then costs one refused request per step down, not one per
request in flight. Holds no litellm; the sender (``requests``) consults it for every request.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final, Literal

log = logging.getLogger(__name__)

Mode = Literal["schema", "json", "prompt"]
#: The order of the steps down.
_NEXT: Final[dict[Mode, Mode]] = {"schema": "json", "json": "prompt"}
_SENT: Final[dict[Mode, str]] = {"schema": "response_format json_schema", "json": "response_format json_object",
                                 "prompt": "no response_format"}
#: How a server's refusal names what it refused: the parameter or either format's name.
_NAMES_FORMAT: Final = re.compile(r"response_format|json_schema|json_object|response format", re.IGNORECASE)
JSON_MODE: Final = {"type": "json_object"}


def names_format(detail: str) -> bool:
    """Whether an error text names the response format (what a refused format's 400 says)."""
    return _NAMES_FORMAT.search(detail) is not None


class OutputMode:
    """The structured output of one run's requests: a mode, and whether it may still step down.

    ``fallback`` False (the user chose the mode, or litellm vouches for the model) keeps ``start`` whatever
    the endpoint says: a refusal is then an ordinary failed request.
    """

    def __init__(self, start: Mode, *, fallback: bool) -> None:
        self.mode: Mode = start
        self.fallback = fallback and start != "prompt"
        #: a reply in the current mode came back: requests need not take turns any more
        self._confirmed = not self.fallback
        self._turn: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._waiting = 0  # requests waiting for the turn
        #: what the run's summary says of the steps down
        self.notes: list[str] = []

    def response_format(self, schema: dict[str, Any], mode: Mode | None = None) -> dict[str, Any] | None:
        """What a request in ``mode`` (default: the current one) sends for a reply held to ``schema``."""
        chosen = self.mode if mode is None else mode
        if chosen == "schema":
            return schema
        return dict(JSON_MODE) if chosen == "json" else None

    @asynccontextmanager
    async def trial(self) -> AsyncIterator[Mode]:
        """The mode a request is sent in; while no reply has confirmed it, the request holds the turn.

        Enter before taking a request slot: the requests waiting for the turn must not hold the slots the
        one holding it needs.
        """
        lock = self._lock()
        if self._confirmed and not self._waiting and not lock.locked():
            yield self.mode
            return
        # In line (the lock is fair) behind the requests that waited for the turn, also once the mode is
        # confirmed: a pack's re-ask does not overtake the packs that came before it.
        self._waiting += 1
        try:
            await lock.acquire()
        finally:
            self._waiting -= 1
        if self._confirmed:  # confirmed by the request that held the turn while this one waited
            lock.release()
            yield self.mode
            return
        try:
            yield self.mode
        finally:
            lock.release()

    def _lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._turn is None or self._turn[0] is not loop:  # asyncio locks belong to one event loop
            self._turn = (loop, asyncio.Lock())
        return self._turn[1]

    def answered(self, sent: Mode) -> None:
        """A reply came back to a request sent in ``sent``: the endpoint takes it."""
        if sent == self.mode:
            self._confirmed = True

    def refused(self, sent: Mode, detail: str) -> bool:
        """A 400 to a request sent in ``sent``: True when the request should go again in the current mode
        (this refusal stepped down, or an earlier one already had); False when it is an ordinary failure."""
        if not self.fallback or sent == "prompt" or not names_format(detail):
            return False
        if sent != self.mode:
            return True  # stepped down already, by another request's refusal
        self.mode = _NEXT[sent]
        self._confirmed = self.mode == "prompt"
        then = "the JSON is asked in the prompt alone" if self.mode == "prompt" else "JSON mode (json_object)"
        note = f"the endpoint refused {_SENT[sent]} ({detail[:160]}): {then} for the rest of the run"
        self.notes.append(note)
        log.warning("warning: %s", note)
        return True
