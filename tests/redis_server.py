"""A throwaway Redis server for the Celery tests: Debian's ``redis-server`` on 127.0.0.1, a free port and a
folder of its own, with an append-only file so that a restart keeps what was queued (as a broker in
production keeps it). ``.ci/run`` installs the package where it is absent.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from faithfulness_pipeline.testing.processes import death_signal, free_port

#: Seconds a server may take to accept connections (a loaded 2-core machine: well under one).
START_LIMIT_S = 30.0


def missing_reason() -> str | None:
    """Why no Redis server can be started here, or None."""
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (apt-get install redis-server; .ci/run does it): no Celery broker"
    return None


def _answers(port: int) -> bool:
    """Whether the server on ``port`` answers PING (a raw RESP exchange: no client library needed)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@dataclass
class RedisServer:
    """One ``redis-server`` process; :meth:`restart` stops it (SIGKILL: a crash) and starts it again on
    the same port and folder."""

    folder: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        command = [
            "redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.folder),
            "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
            "--logfile", str(self.folder / "redis.log"),
        ]  # fmt: skip
        # the server ends with the test worker that started it, even a killed one
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        preexec_fn=death_signal())
        deadline = time.monotonic() + START_LIMIT_S
        while not _answers(self.port):
            if self.process.poll() is not None:
                log = (self.folder / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited with {self.process.returncode}:\n{log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not answer within {START_LIMIT_S} s")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            self.process.wait(timeout=30)
            self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


@contextlib.contextmanager
def redis_server() -> Iterator[RedisServer]:
    folder = Path(tempfile.mkdtemp(prefix="fp-redis-"))
    server = RedisServer(folder)
    try:
        yield server.start()
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
