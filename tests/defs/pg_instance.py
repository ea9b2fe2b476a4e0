"""A DAGSTER_HOME holding the documented PostgreSQL instance (dagster_home/postgres/dagster.yaml), set up
with the once-per-instance commands of docs/scaling-out.md, read from the page and run as printed:
``dagster instance migrate``, then the ``llm_judge`` pool's limit set in the instance with
``dagster instance concurrency set`` (real CLI subprocesses)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from tests.defs.pool_events import POOL
from tests.doc_blocks import block

REPO = Path(__file__).resolve().parents[2]
DAGSTER_CLI = Path(sys.executable).parent / "dagster"


def _recipe() -> list[list[str]]:
    """The page's once-per-instance commands, each split as the shell splits it (comments dropped)."""
    code = block("docs/scaling-out.md", "bash", "dagster instance migrate")
    return [shlex.split(line, comments=True) for line in code.splitlines() if line.strip()]


RECIPE = _recipe()
POOL_LIMIT = int(RECIPE[-1][-1])  # the number the recipe sets
assert RECIPE[-1][:-1] == ["dagster", "instance", "concurrency", "set", POOL], RECIPE

def postgres_home(home: Path) -> Path:
    """``home`` with the PostgreSQL dagster.yaml in it (its URL comes from FP_DAGSTER_PG_URL), before the
    recipe's once-per-instance setup."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "dagster_home" / "postgres" / "dagster.yaml", home / "dagster.yaml")
    return home


def set_up_instance(home: Path, dagster_url: str, env: dict[str, str] | None = None) -> None:
    """Runs the recipe's once-per-instance commands against the instance of ``home`` (``dagster`` is the
    environment's own, as on a machine where the project is installed)."""
    base = {k: v for k, v in (env or os.environ).items() if not k.startswith("DAGSTER_")}
    run_env = {**base, "DAGSTER_HOME": str(home), "FP_DAGSTER_PG_URL": dagster_url}
    for command in RECIPE:
        assert command[0] == "dagster", command
        done = subprocess.run([str(DAGSTER_CLI), *command[1:]], env=run_env, cwd=REPO, capture_output=True,
                              text=True, check=False)  # fmt: skip
        assert done.returncode == 0, f"{' '.join(command)}: exit {done.returncode}\n{done.stderr[-2000:]}"
