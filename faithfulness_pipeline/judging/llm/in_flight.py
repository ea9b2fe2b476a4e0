"""The streams a sender is reading, so that a run that must stop gives them up instead of reading them out.

When the judge finds out that no further request can work (``format_breaker``), waiting for the replies in
flight only holds the run: on a server of one's own they are queued behind each other, minutes each on a CPU.
Closing their connections ends the run at once, and the server stops generating them.

Only a stream the server has begun is given up: litellm hands a request to a worker thread before sending it,
and a request cancelled there leaves its coroutine never awaited (a warning on the user's screen). A request
not yet begun is given up as soon as its head comes; one sent whole ends by itself within ``--timeout``.
"""

from __future__ import annotations

import asyncio
from typing import Any


class StreamsInFlight:
    """``begun`` when a stream's head has come, ``done`` when its request has ended; ``give_up`` cancels every
    stream begun and every one that begins later, and ``given_up`` tells such a cancellation from any other."""

    def __init__(self) -> None:
        self._reading: set[asyncio.Task[Any]] = set()
        self._given_up: set[asyncio.Task[Any]] = set()
        self.stopping = False

    def begun(self, task: asyncio.Task[Any]) -> None:
        self._reading.add(task)
        if self.stopping:
            self._cancel(task)

    def give_up(self) -> None:
        self.stopping = True
        for task in self._reading:
            self._cancel(task)

    def given_up(self, task: asyncio.Task[Any], cancelling: int) -> bool:
        """Whether ``task``'s cancellation was ours, and no one else's (theirs would still be pending after
        ours is taken back; ``cancelling``: the task's count before the request)."""
        return task in self._given_up and task.uncancel() <= cancelling

    def done(self, task: asyncio.Task[Any]) -> None:
        self._reading.discard(task)
        self._given_up.discard(task)

    def _cancel(self, task: asyncio.Task[Any]) -> None:
        if task not in self._given_up:
            self._given_up.add(task)
            task.cancel()
