"""Running a benchmark day: ``dg launch`` of the day's partition (``DAY``) and ``faithfulness-pipeline score``
of the same landing file with the same judge, every process of each run sampled (bench/process_sampling.py).

Both get the caller's environment without its ``FP_*`` and ``DAGSTER_*`` variables, litellm offline, and the
judge as ``FP_JUDGE_*`` variables (none: the offline judge); ``dg launch`` gets a fresh DAGSTER_HOME holding a
copy of the repository's dagster_home/dagster.yaml (its pool limit is part of what is measured) and a fresh
warehouse in the run's folder.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import FAKE_KEY_ENV, ROOT
from day_landing import DAY
from overhead import BENCH_MODEL, ServerProcess
from process_sampling import run_sampled, summary

STORE_NAME = "_judge_store.sqlite"  # the litellm judge's default store, under the warehouse


def base_env() -> dict[str, str]:
    """Offline litellm and nothing inherited that would configure the code location or the CLI."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FP_", "DAGSTER_"))}
    env.update(LITELLM_OFFLINE_MODE="true", LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_LOG="ERROR",
               HF_HUB_OFFLINE="1", DAGSTER_TELEMETRY_DISABLED="1", PYTHONUNBUFFERED="1")
    env[FAKE_KEY_ENV] = os.environ[FAKE_KEY_ENV]
    return env


def _judge_env(base_url: str | None) -> dict[str, str]:
    """The judge as FP_JUDGE_* variables: the code location and the CLI both read them, so both runs use
    the same judge (none set: the offline judge)."""
    if base_url is None:
        return {}
    return {"FP_JUDGE_MODEL": BENCH_MODEL, "FP_JUDGE_API_BASE": base_url, "FP_JUDGE_API_KEY_ENV": FAKE_KEY_ENV}


def home(path: Path) -> Path:
    path.mkdir(parents=True)
    text = (ROOT / "dagster_home" / "dagster.yaml").read_text(encoding="utf-8")
    if "default_limit:" not in text:  # the llm_judge pool limit is part of what is measured
        raise RuntimeError("dagster_home/dagster.yaml has no pool limit (concurrency: pools: default_limit)")
    (path / "dagster.yaml").write_text(text, encoding="utf-8")
    return path


def sizes(warehouse: Path) -> dict[str, int]:
    """Bytes of every table and file the run wrote under the warehouse; the result store apart."""
    sizes: dict[str, int] = {}
    for entry in sorted(warehouse.iterdir()):
        files = [entry] if entry.is_file() else [p for p in entry.rglob("*") if p.is_file()]
        name = "store" if entry.name.startswith(STORE_NAME) else entry.name
        sizes[name] = sizes.get(name, 0) + sum(p.stat().st_size for p in files)
    return sizes


def copy_store(store: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):  # SQLite's side files, if the writer left any
        if Path(f"{store}{suffix}").exists():
            shutil.copy(f"{store}{suffix}", f"{target}{suffix}")


def parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.read_metadata(path).num_rows)


def _requests(server: ServerProcess | None) -> int | None:
    return None if server is None else int(server.stats()["requests"])


@dataclass
class Plan:
    rows: int
    judge: str  # "offline" or "litellm"
    store: str = ""  # litellm only: "cold" or "warm"
    landing: Path | None = None


def run_day(plan: Plan, run_dir: Path, server: ServerProcess | None, warm_store: Path | None,
            kill_above_gb: float, timeout_s: float, settings: dict[str, str] | None = None,
            failed_is_error: bool = True) -> dict[str, Any]:
    """``dg launch`` of the day in a fresh DAGSTER_HOME and warehouse, sampled; ``settings``: more ``FP_*``
    variables for the code location (a table format and its own settings). A run that fails raises, or with
    ``failed_is_error`` False gives its figures so far, ``ok`` False and the log's last error in ``failure``."""
    assert plan.landing is not None
    warehouse = run_dir / "warehouse"
    warehouse.mkdir(parents=True)
    if warm_store is not None:
        copy_store(warm_store, warehouse / STORE_NAME)  # where the code location's judge looks for it
    env = {**base_env(), **_judge_env(None if server is None else server.base_url),
           "DAGSTER_HOME": str(home(run_dir / "dagster_home")), "FP_LANDING": str(plan.landing),
           "FP_WAREHOUSE": str(warehouse), "FP_PARTITIONS_START": DAY, **(settings or {})}
    command = [str(Path(sys.executable).parent / "dg"), "launch", "--assets", "group:answer_quality",
               "--partition", DAY]
    before = _requests(server)
    log = run_dir / "dg.log"
    seen = run_sampled(command, env, log, kill_above_gb, timeout_s)
    text = log.read_text(encoding="utf-8", errors="replace")
    result = summary(seen, text)
    result["requests"] = None if server is None else _requests(server) - (before or 0)
    result["ok"] = seen.returncode == 0 and "RUN_SUCCESS" in text and not seen.killed
    result["tables"] = sizes(warehouse)
    # Every file of the day's partition in the Parquet layout (a day split into shards may write more than one);
    # 0 in a format that keeps its rows elsewhere (the caller counts them through the format).
    result["scored_rows"] = sum(parquet_rows(p) for p in (warehouse / "scored_conversations" / f"ds={DAY}").rglob("*.parquet"))
    if not result["ok"] and not seen.killed:
        if failed_is_error:
            raise RuntimeError(f"dg launch failed (exit {seen.returncode}): {text[-3000:]}")
        result["failure"] = _last_error(text)
    return result


def _last_error(log_text: str) -> str:
    """The last step failure of a Dagster log: the step and the exception's line."""
    step = ""
    for line in log_text.splitlines():
        if " - STEP_FAILURE - " in line:
            step = line.split(" - STEP_FAILURE - ")[0].rsplit(" - ", 1)[-1]
    causes = [line.strip() for line in log_text.splitlines()  # exception lines; not the CLI's own "Error: ..."
              if not line.startswith((" ", "\t", "Error: ")) and ("Error: " in line or "Exception: " in line)]
    return f"step {step or '?'}: {causes[-1] if causes else '?'}"


def run_cli(plan: Plan, run_dir: Path, server: ServerProcess | None, store: Path | None, kill_above_gb: float,
            timeout_s: float) -> dict[str, Any]:
    """``faithfulness-pipeline score`` of the same file with the same judge, sampled the same way."""
    assert plan.landing is not None
    out = run_dir / "cli-out.parquet"
    command = [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(plan.landing), "-o", str(out),
               "--quiet"]
    if store is not None:
        command += ["--store", str(store)]
    env = {**base_env(), **_judge_env(None if server is None else server.base_url)}
    before = _requests(server)
    log = run_dir / "cli.log"
    seen = run_sampled(command, env, log, kill_above_gb, timeout_s)
    if seen.returncode != 0 and not seen.killed:
        raise RuntimeError(f"the CLI failed (exit {seen.returncode}): {log.read_text(errors='replace')[-3000:]}")
    result = summary(seen, "")
    result["requests"] = None if server is None else _requests(server) - (before or 0)
    result["ok"] = seen.returncode == 0 and not seen.killed
    result["scored_rows"] = parquet_rows(out) if out.exists() else 0
    result["out_bytes"] = out.stat().st_size if out.exists() else 0
    return result
