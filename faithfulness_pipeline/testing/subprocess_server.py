"""The fake server in a process of its own (``python -m faithfulness_pipeline.testing.fakellm``), as the CLI and
Dagster tests
could run it: started, its READY line read, and stopped if the test left it running."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    process: subprocess.Popen[str]
    base_url: str
    lines: queue.Queue[str]  # what it printed after READY (a STATS line when it stops)


def _read_lines(stream: Any, sink: queue.Queue[str]) -> None:
    for line in stream:
        sink.put(line)


@contextmanager
def served(*args: str) -> Iterator[Served]:
    """The server started with ``args``; on leaving, killed if still running and its output read to the end."""
    process = subprocess.Popen([sys.executable, "-m", "faithfulness_pipeline.testing.fakellm", *args], cwd=REPO_ROOT,
                               stdout=subprocess.PIPE, text=True)  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True)
    reader.start()
    try:
        ready = lines.get(timeout=30).strip()
        assert ready.startswith("READY http://127.0.0.1:"), ready
        yield Served(process, ready.split(" ", 1)[1], lines)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        reader.join(timeout=10)
