"""The environment of a user's own shell, for tests that run a documented command as printed: no
variables of the test run, no activated virtualenv (the command must find the project's environment
itself, through ``uv run``), no provider API keys."""

from __future__ import annotations

import os
from pathlib import Path

_VENV_BIN = str(Path(__file__).resolve().parents[1] / ".venv" / "bin")


def user_env() -> dict[str, str]:
    skip = ("FP_", "DAGSTER_", "VIRTUAL_ENV", "PYTEST_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip) and not k.endswith("_API_KEY")}
    # `uv run` (the README's test command) puts the venv first on PATH, which a user's shell does not have;
    # the uv that runs the suite (it names itself in UV) is the one the README's install line put on PATH.
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p != _VENV_BIN]
    if "UV" in os.environ:
        path.insert(0, os.path.dirname(os.environ["UV"]))
    env["PATH"] = os.pathsep.join(path)
    return env
