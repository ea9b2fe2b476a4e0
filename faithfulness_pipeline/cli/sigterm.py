"""SIGTERM handled like Ctrl-C while a command runs, so a stopped run unwinds instead of dying mid-write."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_TERMINATED: list[bool] = []  # set once SIGTERM arrived


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Makes SIGTERM (a service manager or ``kill`` stopping the run) do what Ctrl-C does while the command
    runs: it delivers SIGINT, so asyncio cancels the run and everything unwinds the same way — temporary
    files removed, nothing partial written, the store keeping every result committed so far. The CLI's own
    process only (library code never installs signal handlers); the previous handler is put back."""

    def handler(signum: int, frame: object) -> None:
        _TERMINATED.append(True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
        os.kill(os.getpid(), signal.SIGINT)

    _TERMINATED.clear()
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def terminated() -> bool:
    """Whether the KeyboardInterrupt of the latest :func:`sigterm_as_interrupt` block came from SIGTERM
    (the run was stopped) rather than Ctrl-C (it was interrupted): the message and exit status differ."""
    return bool(_TERMINATED)
