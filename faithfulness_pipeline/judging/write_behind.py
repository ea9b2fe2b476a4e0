"""Store writes on a thread of their own, so that a store another process holds locked delays the writes and
never the replies.

Results are kept the moment they validate, from the event loop that reads the replies. A SQLite writer waits
up to its busy timeout for another process's write lock; done on the loop, that wait held every reply in
flight until their requests timed out and were asked (and billed) again. Here the loop only hands the rows
over; one thread saves whatever has gathered since its last save in one transaction, so a long lock costs one
wait (and, past the busy timeout, one failed save and one warning line), not one per reply.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


class WriteBehind(Generic[T]):
    """Hands rows to ``save`` on a background thread, in order, as few calls as the pace of saves allows."""

    def __init__(self, save: Callable[[Sequence[T]], None], name: str = "fp-store-writer") -> None:
        self._save = save
        self._name = name
        self._pending: list[T] = []
        self._saving = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()

    def submit(self, rows: Sequence[T]) -> None:
        """Queues ``rows``; returns at once."""
        if not rows:
            return
        with self._cond:
            if self._closed:  # a late reply after close: save it here rather than lose it
                self._save(rows)
                return
            self._pending.extend(rows)
            if self._thread is None:
                # A daemon: a save stuck on a lock must never keep an interrupted process alive.
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self) -> None:
        """Blocks until every row submitted so far has been handed to ``save`` and that call has returned."""
        with self._cond:
            while self._pending or self._saving:
                self._cond.wait()

    def close(self) -> None:
        """Flushes, then stops the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self.flush()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                batch, self._pending = self._pending, []
                self._saving = True
            try:
                self._save(batch)
            except Exception as exc:  # ``save`` reports its own failures; this thread must outlive any
                log.warning("store write failed (%s): %d results not kept", type(exc).__name__, len(batch))
            finally:
                with self._cond:
                    self._saving = False
                    self._cond.notify_all()
