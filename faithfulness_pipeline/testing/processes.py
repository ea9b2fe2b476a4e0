"""What every server the tests start in a process of its own needs: a free port on 127.0.0.1, an end when its
parent dies however it dies, and a stop that waits and then kills."""

from __future__ import annotations

import ctypes
import signal
import socket
import subprocess
from collections.abc import Callable
from typing import Any


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def death_signal() -> Callable[[], None] | None:
    """What a server's process runs before it starts: on Linux, have the kernel end it when the process that
    started it dies, however it dies (a SIGKILLed test worker leaves no server holding a port and two cores).
    libc is looked up here, in the parent: the child between fork and exec only makes the one call."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def stop(process: subprocess.Popen[Any], grace_s: float = 20) -> None:
    """SIGTERM, ``grace_s`` to exit, then SIGKILL."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
