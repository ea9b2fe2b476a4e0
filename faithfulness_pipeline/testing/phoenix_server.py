"""A real Arize Phoenix server for the traces tests, in a process and a virtual environment of its own.

Phoenix cannot share our environment (its GraphQL stack needs a newer graphql-core than Dagster's webserver
allows), so, like a team's Phoenix, it runs beside the pipeline: ``python -m
faithfulness_pipeline.testing.phoenix_server prepare`` installs the pinned release into
``~/.cache/faithfulness-pipeline/phoenix-venv`` once per machine (``.ci/run`` does), and :func:`phoenix`
starts it on 127.0.0.1 with a throwaway working folder (its own SQLite), no telemetry and no external
resources, and stops it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from faithfulness_pipeline.testing.processes import death_signal, free_port, stop

#: The release the tests run against.
PHOENIX_VERSION: Final = "20.26.1"
VENV: Final = Path(os.environ.get("FP_PHOENIX_VENV", Path.home() / ".cache/faithfulness-pipeline/phoenix-venv"))
_START_S: Final = 180.0


class PhoenixUnavailable(RuntimeError):
    """No Phoenix installed here: run ``python -m faithfulness_pipeline.testing.phoenix_server prepare``."""


@dataclass(frozen=True)
class Phoenix:
    url: str
    log: Path


def executable() -> Path:
    binary = VENV / "bin" / "phoenix"
    if not binary.exists():
        raise PhoenixUnavailable(f"no Phoenix at {binary}: run `python -m faithfulness_pipeline.testing.phoenix_server "
                                 "prepare` (it installs arize-phoenix into a virtual environment of its own)")
    return binary


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


@contextmanager
def phoenix(workdir: Path, settings: Mapping[str, str] | None = None) -> Iterator[Phoenix]:
    """A Phoenix server on a free port of 127.0.0.1, its database in ``workdir``; stopped on leaving.
    ``settings``: more of Phoenix's variables (``PHOENIX_ENABLE_AUTH``, say, for a server that wants a key)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(workdir), "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port),
           "PHOENIX_GRPC_PORT": str(free_port()), "PHOENIX_TELEMETRY_ENABLED": "false",
           "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false", "PHOENIX_LOG_SQL": "false", **(settings or {})}
    log = workdir / "phoenix.log"
    with open(log, "w", encoding="utf-8") as sink:
        process = subprocess.Popen([str(executable()), "serve"], env=env, stdout=sink, stderr=subprocess.STDOUT,
                                   cwd=workdir, preexec_fn=death_signal())
    try:
        deadline = time.monotonic() + _START_S
        while not _healthy(url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise PhoenixUnavailable(f"Phoenix did not start: {log.read_text(encoding='utf-8')[-2000:]}")
            time.sleep(0.5)
        yield Phoenix(url, log)
    finally:
        stop(process)


def prepare() -> None:
    """Installs the pinned Phoenix into :data:`VENV` unless it is there already."""
    marker = VENV / f".arize-phoenix-{PHOENIX_VERSION}"
    if marker.exists():
        return
    python = str(VENV / "bin" / "python")
    # The uv that runs us (`uv run` names itself in UV) or the one on PATH (the README puts .uv/bin there),
    # making Phoenix's environment from the interpreter under ours.
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv is None:
        sys.exit("uv not found: run the README's install line first (it puts .uv/bin on PATH)")
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([uv, "venv", "--quiet", "--allow-existing", str(VENV), "--python", base], check=True)
    subprocess.run([uv, "pip", "install", "--quiet", "--python", python, f"arize-phoenix=={PHOENIX_VERSION}"],
                   check=True)  # fmt: skip
    marker.touch()


if __name__ == "__main__":
    if sys.argv[1:] != ["prepare"]:
        sys.exit("usage: python -m faithfulness_pipeline.testing.phoenix_server prepare")
    prepare()
