"""The code location through Dagster's own CLI, in a subprocess with a temporary DAGSTER_HOME."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from dagster import DagsterEventType

from tests.defs.conftest import ASSETS, CALIBRATION_ASSETS, REPO, SAMPLE, TABLES, make_home, sample_ids
from tests.doc_blocks import block, run_shell, shell_env

DAY = "2026-11-25"


def test_the_documented_dg_launch_commands_materialise_a_day_and_calibrate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/pipeline.md's two `dg launch` lines, as printed, from the repository root (where `dg` finds the
    project through pyproject.toml's [tool.dg]), in a temporary instance, landing and warehouse."""
    commands = block("docs/pipeline.md", "bash", "dg launch")
    assert f"--partition {DAY}" in commands
    home = make_home(tmp_path / "dagster_home")
    landing = tmp_path / "landing"
    shutil.copytree(SAMPLE, landing, ignore=shutil.ignore_patterns("*.py"))
    warehouse = tmp_path / "warehouse"
    env = shell_env(DAGSTER_HOME=str(home), DAGSTER_TELEMETRY_DISABLED="1", FP_WAREHOUSE=str(warehouse),
                    FP_LANDING=str(landing), FP_CALIBRATION_LABELLED=str(REPO / "sample_labelled"),
                    PYTHONUNBUFFERED="1")  # fmt: skip
    proc = run_shell(commands, REPO, env, timeout=600)
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
        assert len(runs) == 2 and all(run.status == dg.DagsterRunStatus.SUCCESS for run in runs)
        (calibration_run,) = [run for run in runs if run.job_name == "calibrate_judge"]
        (day_run,) = [run for run in runs if run.job_name != "calibrate_judge"]
        assert day_run.tags.get("dagster/partition") == DAY
        calibrated = {
            e.dagster_event.asset_key.to_user_string()
            for e in instance.all_logs(calibration_run.run_id)
            if e.dagster_event
            and e.dagster_event_type == DagsterEventType.ASSET_MATERIALIZATION
            and e.dagster_event.asset_key
        }
        assert calibrated == CALIBRATION_ASSETS
        events = instance.all_logs(day_run.run_id)
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
        assert len(checks) == 15  # the eleven rules, the WARN that the offline baseline scored the day, the spend cap,
        # the labels' coverage and agreement
        failed = {c.check_name for c in checks if not c.passed}  # type: ignore[union-attr]
        assert failed == {"llm_judge_used"}
