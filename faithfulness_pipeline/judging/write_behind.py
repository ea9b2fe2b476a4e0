"""Results a store cannot take at once, kept and written by a thread of their own.

The stack keeps each result the moment it validates, on the event loop, so that a run killed at any
instant has stored every reply it read. That write must never wait: while another process holds the
store's write lock (a second run sharing the file, a ``sqlite3`` shell, a backup), a waiting write would
hold every reply in flight unread until their timeouts fired and they were asked (and billed) again. So a
store that can try a write without waiting (:class:`TryingStore`) is tried first; rows it refuses go to
a :class:`WriteBehind`, whose thread writes whatever has gathered in one transaction when the lock is
free. Until then those rows are served from memory to this run's lookups, and they are written before a
lease on them is given back (:meth:`WriteBehind.flush`), so another worker never pays for them either.
Only a process killed while rows wait loses them (they are paid again on the next run).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from faithfulness_pipeline.judging.store.protocol import Value

#: ``(key, step, value)`` as ``Store.put_many`` takes it
Row = tuple[bytes, str, Value]


@runtime_checkable
class TryingStore(Protocol):
    """A store that can try a write without waiting for another process's lock."""

    def try_put_many(self, rows: Sequence[Row]) -> bool:
        """Stores ``rows`` now and returns True, or returns False at once (nothing stored) when the write
        would have to wait."""
        ...


class WriteBehind:
    """Rows waiting for the store, in order; ``put`` (the store's blocking write) runs on a daemon thread,
    ``failed`` is told when a write fails (the rows are dropped then: they cost money, never results)."""

    def __init__(self, put: Callable[[Sequence[Row]], None], failed: Callable[[Exception], None]) -> None:
        self._put = put
        self._failed = failed
        self._cond = threading.Condition()
        self._queue: list[Row] = []
        self._pending: dict[bytes, Value] = {}
        self._writing = 0  # rows taken off the queue and not yet written
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def busy(self) -> bool:
        """Whether rows are waiting or being written (then new rows queue behind them, to keep the order)."""
        with self._cond:
            return bool(self._queue) or self._writing > 0

    def add(self, rows: Sequence[Row]) -> None:
        """Queues ``rows`` for the writer thread. Once closed (a run ending, or cancelled while replies still
        come in), the rows are written here instead, waiting for the store if they must: paid results are
        kept either way, and a late reply is no failure."""
        with self._cond:
            closed = self._closed
            if not closed:
                self._enqueue(rows)
        if closed:
            try:
                self._put(rows)
            except Exception as exc:  # as on the writer thread: it costs money, never results
                self._failed(exc)

    def _enqueue(self, rows: Sequence[Row]) -> None:
        """Hands ``rows`` to the writer thread (started on first use); the caller holds ``_cond``."""
        self._queue.extend(rows)
        self._pending.update((key, value) for key, _, value in rows)
        if self._thread is None:
            self._thread = threading.Thread(target=self._write, name="result-store-writer", daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def get(self, key: bytes) -> Value | None:
        """The value of ``key`` if it is waiting to be written."""
        with self._cond:
            return self._pending.get(key)

    def flush(self) -> None:
        """Returns once every row added so far is written (or its write failed)."""
        with self._cond:
            self._cond.wait_for(lambda: not self._queue and self._writing == 0)

    def close(self) -> None:
        """Writes what is waiting, then stops the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _write(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
                self._writing = len(batch)
            try:
                self._put(batch)
            except Exception as exc:  # a store that fails costs money, never the run
                self._failed(exc)
            with self._cond:
                for key, _, value in batch:
                    if self._pending.get(key) is value:
                        del self._pending[key]
                self._writing = 0
                self._cond.notify_all()
