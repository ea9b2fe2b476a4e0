"""What one run already knows: results by content key, so identical items are asked once per run.

Warehouse traffic repeats itself (an FAQ bot gives the same answer to the same question from the same
passages thousands of times; retries and re-asks duplicate rows). The judge stack (``judging.stack``)
keeps, per step, the results of the last ``capacity`` distinct items of the run and the keys being asked
right now; an identical item of a later call (a later chunk) gets a copy (:func:`copy_of`), and one of a
call running at the same time waits for the same answer instead of sending its own request. Memory stays
bounded on a run of millions of rows: the oldest results are forgotten first (with a result store they are
still found there).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import replace
from typing import Any, Final, Generic, TypeVar

from faithfulness_pipeline.core.port import NO_USAGE, ExtractResult, ResultSource, VerdictResult, source_of

R = TypeVar("R", ExtractResult, VerdictResult)

#: Distinct items per step a run remembers: at ~1-2 KB a result, some 60 MB for both steps at most; a
#: chunk's worth of distinct rows (10,000 by default) twice over.
RUN_MEMORY_ITEMS: Final = 20_000


class RunMemory(Generic[R]):
    """Results of one step by content key (the most recent ``capacity``), and the keys being asked now."""

    def __init__(self, capacity: int = RUN_MEMORY_ITEMS) -> None:
        self.capacity = capacity
        self._done: OrderedDict[bytes, R] = OrderedDict()
        self._asking: dict[bytes, asyncio.Future[R]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def known(self, key: bytes) -> R | None:
        result = self._done.get(key)
        if result is not None:
            self._done.move_to_end(key)
        return result

    def asking(self, key: bytes) -> asyncio.Future[R] | None:
        """The answer another call of this run is waiting for, if one is asking for ``key`` right now."""
        self._bind()
        return self._asking.get(key)

    def start(self, key: bytes) -> None:
        """This call asks for ``key``: later identical items wait for its answer."""
        self._bind()
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_quiet)
        self._asking[key] = future

    def finish(self, key: bytes, result: R) -> None:
        """The answer for ``key``: handed to those waiting; kept for later items if it is not a failure."""
        future = self._asking.pop(key, None)
        if future is not None and not future.done():
            future.set_result(result)
        if result.error is None and self.capacity > 0:
            self._done[key] = result
            self._done.move_to_end(key)
            while len(self._done) > self.capacity:
                self._done.popitem(last=False)

    def abandon(self, keys: list[bytes], reason: BaseException) -> None:
        """The call asking for ``keys`` failed: those waiting for them fail the same way."""
        for key in keys:
            future = self._asking.pop(key, None)
            if future is not None and not future.done():
                future.set_exception(reason)

    def _bind(self) -> None:
        # Futures belong to one event loop: a new run on a new loop starts with nobody asking.
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop = loop
            self._asking.clear()


def _quiet(future: asyncio.Future[Any]) -> None:
    # A failure nobody waited for is the asking call's own, raised there: not "never retrieved" noise.
    if not future.cancelled():
        future.exception()


#: Whole rows a run remembers having kept (16-byte keys: a few MB).
RUN_MEMORY_ROWS: Final = 100_000


class RecentKeys:
    """The most recent ``capacity`` keys added: whole rows this run kept in the store, so that a later
    identical row served from there is told apart as a duplicate of this run."""

    def __init__(self, capacity: int = RUN_MEMORY_ROWS) -> None:
        self.capacity = capacity
        self._keys: OrderedDict[bytes, None] = OrderedDict()

    def add(self, keys: list[bytes]) -> None:
        for key in keys:
            self._keys[key] = None
            self._keys.move_to_end(key)
        while len(self._keys) > self.capacity:
            self._keys.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._keys


def copy_of(result: R, item_id: str) -> R:
    """An identical item's result, for another item: no request was sent for it, nothing billed. A copy of
    a store hit is served from the store; a copy of what this run produced is a duplicate; a copy of an item
    the spend cap kept from being sent is skipped too."""
    original = source_of(result)
    source: ResultSource = original if original in ("store", "skipped") else "duplicate"
    return replace(result, id=item_id, cached=True, source=source, billed=NO_USAGE)
