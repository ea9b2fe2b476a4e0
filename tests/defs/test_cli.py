"""The code location through Dagster's own CLI, in a subprocess with a temporary DAGSTER_HOME."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from dagster import DagsterEventType

from tests.defs.conftest import ASSETS, REPO, SAMPLE, TABLES, make_home, sample_ids, subprocess_env

DAY = "2026-11-25"


def test_dg_launch_materialises_every_asset_of_a_day(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = make_home(tmp_path / "dagster_home")
    landing = tmp_path / "landing"
    shutil.copytree(SAMPLE, landing, ignore=shutil.ignore_patterns("*.py"))
    warehouse = tmp_path / "warehouse"
    dg_cli = Path(sys.executable).parent / "dg"
    # cwd = the repository root: `dg` finds the project through pyproject.toml's [tool.dg]
    proc = subprocess.run(
        [str(dg_cli), "launch", "--assets", "group:answer_quality", "--partition", DAY],
        cwd=REPO,
        env=subprocess_env(home, warehouse, landing),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]

    for table in TABLES:
        assert (warehouse / table / f"ds={DAY}" / "data.parquet").is_file(), table
    assert (warehouse / "answer_quality.duckdb").is_file()
    scored = pl.read_parquet(warehouse / "scored_conversations" / f"ds={DAY}" / "data.parquet")
    assert set(scored.get_column("row_key").to_list()) == sample_ids()[DAY]

    # the run, its materialisations and its checks are recorded in the temporary instance only
    monkeypatch.setenv("DAGSTER_HOME", str(home))  # dagster.yaml puts the SQLite storage in $DAGSTER_HOME
    with dg.DagsterInstance.get() as instance:
        runs = instance.get_runs()
        assert len(runs) == 1 and runs[0].status == dg.DagsterRunStatus.SUCCESS
        assert runs[0].tags.get("dagster/partition") == DAY
        events = instance.all_logs(runs[0].run_id)
        materialized = {
            e.dagster_event.asset_key.to_user_string()
            for e in events
            if e.dagster_event
            and e.dagster_event_type == DagsterEventType.ASSET_MATERIALIZATION
            and e.dagster_event.asset_key
        }
        assert materialized == ASSETS
        checks = [
            e.dagster_event.event_specific_data
            for e in events
            if e.dagster_event and e.dagster_event_type == DagsterEventType.ASSET_CHECK_EVALUATION
        ]
        assert len(checks) == 12  # the eleven rules, and the WARN that the offline baseline scored the day
        failed = {c.check_name for c in checks if not c.passed}  # type: ignore[union-attr]
        assert failed == {"llm_judge_used"}
