"""What the layers around a judge count and notice in one run: results not sent for, and notes.

The run memory, the store, the leases and the row cache all count here, from the event loop and from the
worker threads that do lookups (hence the lock); the stack adds it to the inner judge's own stats. A store
that fails costs money, never rows: the failure is a note in the stats and one log line.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from faithfulness_pipeline.core.port import ERROR_CHARS, JudgeStats

log = logging.getLogger("faithfulness_pipeline.judging")


class Tally:
    """Counts of results served without a request, and notes for the run's summary. ``redact`` masks
    secrets in what an exception says before it is logged."""

    def __init__(self, redact: Callable[[str], str] = str) -> None:
        self._redact = redact
        self._lock = threading.Lock()
        self._cached = 0
        self._duplicates = 0
        self._notes: list[str] = []

    def count(self, *, cached: int = 0, duplicates: int = 0) -> None:
        """``cached`` results came from the store, ``duplicates`` were copies of this run's own."""
        with self._lock:
            self._cached += cached
            self._duplicates += duplicates

    def note(self, note: str) -> bool:
        """Adds ``note`` for the summary; whether it is new in this run."""
        with self._lock:
            if note in self._notes:
                return False
            self._notes.append(note)
            return True

    def warn(self, note: str, exc: BaseException) -> None:
        """``note`` for the summary, and one log line with what went wrong (secrets masked) the first time:
        a store that stays down for a run is one line, not one per write."""
        if self.note(note):
            log.warning("%s: %s", note, self._redact(str(exc))[:ERROR_CHARS])

    def added_to(self, inner: JudgeStats) -> JudgeStats:
        """``inner`` (what the judge sent) with what was served without sending."""
        with self._lock:
            served = JudgeStats(cached_items=self._cached, duplicate_items=self._duplicates, notes=list(self._notes))
        return inner + served
