"""A DAGSTER_HOME holding the documented PostgreSQL instance (dagster_home/postgres/dagster.yaml), set up
as the README's "Scaling out" recipe says: ``dagster instance migrate``, then the ``llm_judge`` pool's
limit set in the instance with ``dagster instance concurrency set`` (real CLI subprocesses)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.defs.pool_events import POOL

REPO = Path(__file__).resolve().parents[2]
POOL_LIMIT = 2  # the number the README's recipe sets
DAGSTER_CLI = Path(sys.executable).parent / "dagster"


def postgres_home(home: Path) -> Path:
    """``home`` with the PostgreSQL dagster.yaml in it (its URL comes from FP_DAGSTER_PG_URL), before the
    recipe's once-per-instance setup."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "dagster_home" / "postgres" / "dagster.yaml", home / "dagster.yaml")
    return home


def set_up_instance(home: Path, dagster_url: str, env: dict[str, str] | None = None) -> None:
    """Runs the recipe's once-per-instance commands against the instance of ``home``."""
    base = {k: v for k, v in (env or os.environ).items() if not k.startswith("DAGSTER_")}
    run_env = {**base, "DAGSTER_HOME": str(home), "FP_DAGSTER_PG_URL": dagster_url}
    for args in (["migrate"], ["concurrency", "set", POOL, str(POOL_LIMIT)]):
        done = subprocess.run([str(DAGSTER_CLI), "instance", *args], env=run_env, cwd=REPO, capture_output=True,
                              text=True, check=False)  # fmt: skip
        assert done.returncode == 0, f"dagster instance {' '.join(args)}: exit {done.returncode}\n{done.stderr[-2000:]}"
