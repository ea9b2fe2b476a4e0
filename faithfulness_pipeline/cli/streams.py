"""Standard output and error that nobody reads any more cannot fail a command.

``score ... 2>&1 | head`` closes the pipe once ``head`` has its lines; every later progress line, log line
or summary would then raise BrokenPipeError, and Python's own flush at exit would turn a complete run into
exit status 1 (or 120). While a command runs, its streams are wrapped: the first write that fails points
the file descriptor at the null device (so the interpreter's last flush succeeds too) and the rest of the
output is dropped. The outputs and the exit status are the run's own.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO


class _Unfailing:
    """A text stream whose writes and flushes never raise: after the first failure they do nothing."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._gone = False

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                return self._stream.write(text)
            except (OSError, ValueError):  # a closed pipe or descriptor (ValueError: a closed file object)
                self._silence()
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._silence()

    def _silence(self) -> None:
        self._gone = True
        with contextlib.suppress(OSError, ValueError, AttributeError, NotImplementedError):
            fd = self._stream.fileno()
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, fd)  # what the stream still buffers goes nowhere, without an error
            finally:
                os.close(null)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def unfailing_streams() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` unable to fail the command while the block runs (then put back)."""
    before = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Unfailing(before[0]), _Unfailing(before[1])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = before
