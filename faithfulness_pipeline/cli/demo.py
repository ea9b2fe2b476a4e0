"""The quickstart: run the Dagster job for every day of the sample data with the offline judge.

``faithfulness-pipeline demo`` (or ``python -m faithfulness_pipeline.cli demo``) materialises every asset
and check of the ``score_conversations`` job, one run per day (the all-days DuckDB views and report in the
last day's run only), after one run of ``calibrate_judge`` on the
hand-labelled sample (``sample_labelled/``, or ``FP_CALIBRATION_LABELLED``), records the runs in the local
Dagster instance (so ``dg dev`` shows them afterwards), then prints where the tables are, a summary, the
judge's agreement with the labels, that the offline baseline did the scoring, and the next commands to try,
each runnable as printed (``tests/defs/test_demo.py`` runs them).

Defaults, each overridable by its environment variable: ``DAGSTER_HOME`` = the repository's
``dagster_home`` (absolute), ``FP_WAREHOUSE`` = ``./warehouse``, ``FP_LANDING`` = the repository's
``sample_data``. The judge is always the offline one here: the demo needs no key and no network.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click
import polars as pl

from faithfulness_pipeline.judging.catalog import note_on

if TYPE_CHECKING:  # dagster is imported once DAGSTER_HOME is set (run_demo)
    from dagster import DagsterInstance

    from faithfulness_pipeline.defs import DefsSettings

_REPO = Path(__file__).resolve().parents[2]  # faithfulness_pipeline/cli/demo.py -> the repository


@dataclass(frozen=True)
class DemoResult:
    warehouse: Path
    duckdb: Path
    dagster_home: Path
    partitions: list[str]
    rows: dict[str, int]
    failed_checks: list[str]
    seconds: float
    warnings: list[str]  # WARN check results: the run still counts as passed
    calibration: str | None  # the judge_calibration summary line, when labelled rows were calibrated
    report: Path | None = None
    #: variables of the environment the demo leaves out (it scores with the offline judge into Parquet), as set
    ignored: tuple[str, ...] = ()


def _default_home() -> Path:
    bundled = _REPO / "dagster_home"
    return bundled if (bundled / "dagster.yaml").exists() else Path.cwd() / "dagster_home"


def _default_labelled() -> Path:
    return _REPO / "sample_labelled"


def _default_landing() -> Path:
    bundled = _REPO / "sample_data"
    return bundled if bundled.is_dir() else Path.cwd() / "sample_data"


def _ensure_instance_config(home: Path) -> None:
    """A new DAGSTER_HOME gets the repository's instance settings (telemetry off, SQLite, the LLM pool)."""
    target = home / "dagster.yaml"
    if target.exists():
        return
    bundled = _REPO / "dagster_home" / "dagster.yaml"
    text = bundled.read_text(encoding="utf-8") if bundled.exists() else "telemetry:\n  enabled: false\n"
    target.write_text(text, encoding="utf-8")


def run_demo(
    warehouse: Path | None = None, landing: Path | None = None, dagster_home: Path | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> DemoResult:
    """Materialise every asset for every day of the landing data; returns what was written. ``progress`` hears
    a line before each slow step (loading Dagster, each run), so a terminal is never silent for long."""
    progress("Loading Dagster and the pipeline's definitions ...")
    home = (dagster_home or Path(os.environ.get("DAGSTER_HOME") or _default_home())).resolve()
    home.mkdir(parents=True, exist_ok=True)
    _ensure_instance_config(home)
    os.environ["DAGSTER_HOME"] = str(home)  # the instance must be found by this process and by `dg dev`

    import dagster as dg  # after DAGSTER_HOME is set

    from faithfulness_pipeline.defs import DefsSettings, build_defs
    from faithfulness_pipeline.defs.calibration import JOB as CALIBRATION_JOB
    from faithfulness_pipeline.defs.names import DUCKDB, REPORT
    from faithfulness_pipeline.defs.schedules import JOB

    root = (warehouse or Path(os.environ.get("FP_WAREHOUSE") or "warehouse")).resolve()
    source = (landing or Path(os.environ.get("FP_LANDING") or _default_landing())).resolve()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP_JUDGE_")}  # the offline judge
    env.update(FP_WAREHOUSE=str(root), FP_LANDING=str(source), FP_TABLE_FORMAT="parquet")
    ignored = tuple(f"{name}={os.environ[name]}" for name in ("FP_JUDGE_MODEL", "FP_TABLE_FORMAT")
                    if os.environ.get(name) and not (name == "FP_TABLE_FORMAT" and os.environ[name] == "parquet"))
    if not env.get("FP_CALIBRATION_LABELLED") and _default_labelled().is_dir():
        env["FP_CALIBRATION_LABELLED"] = str(_default_labelled())
    settings = DefsSettings.from_env(env)
    defs = build_defs(settings)
    days = _days_to_run(settings)
    job = defs.resolve_job_def(JOB)
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    failed: list[str] = []
    warned: list[str] = []
    calibration: str | None = None
    started = time.monotonic()
    with dg.DagsterInstance.get() as instance:
        # Calibration first: each day's scored table then names the calibration of its judge.
        runs: list[tuple[str, dg.JobDefinition, str | None, list[dg.AssetKey] | None]] = []
        if settings.calibration.labelled:
            runs.append(("calibration", defs.resolve_job_def(CALIBRATION_JOB), None, None))
        # The DuckDB views and the report cover every day: built once, by the last day's run, they are what
        # three builds would leave (the report was the largest part of the demo's time, drawn once a day).
        every_day = sorted(job.asset_layer.executable_asset_keys)
        daily_only = [key for key in every_day if key.to_user_string() not in (DUCKDB, REPORT)]
        runs += [(day, job, day, None if day == days[-1] else daily_only) for day in days]
        for n, (name, to_run, partition, selection) in enumerate(runs, start=1):
            what = "calibrating the judge on the labelled sample" if partition is None else f"scoring day {name}"
            progress(f"Run {n} of {len(runs)}: {what} ...")
            result = to_run.execute_in_process(partition_key=partition, instance=instance, run_config=quiet,
                                               asset_selection=selection)  # fmt: skip
            for e in result.get_asset_check_evaluations():
                if not e.passed:
                    line = f"{name} {e.asset_key.to_user_string()}.{e.check_name}: {e.description or 'failed'}"
                    (warned if e.severity == dg.AssetCheckSeverity.WARN else failed).append(line)
            if partition is None:
                calibration = _calibration_line(instance)
    elapsed = time.monotonic() - started
    rows = {table: _rows(root / table) for table in _TABLES}
    return DemoResult(root, settings.warehouse.duckdb_file(), home, days, rows, failed, elapsed, warned, calibration,
                      settings.warehouse.report_file(), ignored)


def _days_to_run(settings: DefsSettings) -> list[str]:
    """The partitions the landing data has rows for, in order."""
    from faithfulness_pipeline.defs.partitions import daily_partitions
    from faithfulness_pipeline.sources.table_landing import TableSettings, landing_days

    keys = set(daily_partitions(settings.partitions_start, settings.landing.zone()).get_partition_keys())
    resource = settings.landing
    where = TableSettings(resource.path, resource.query, resource.iceberg_catalog)
    days = landing_days(where, resource.timestamp_column, resource.zone(), resource.undated())
    return sorted({d.isoformat() for d in days} & keys)

def _calibration_line(instance: DagsterInstance) -> str | None:
    """The judge's agreement with the labelled rows, from the latest calibration's metadata."""
    from dagster import AssetKey

    event = instance.get_latest_materialization_event(AssetKey("judge_calibration"))
    materialization = event.asset_materialization if event is not None else None
    if materialization is None:
        return None
    meta = {k: v.value for k, v in materialization.metadata.items()}
    ba = meta.get("balanced_accuracy")
    ba_text = f"{ba:.3f} {meta.get('balanced_accuracy_95', '')}" if isinstance(ba, float) else str(ba)
    return (f"Calibration ({meta.get('labelled_rows')} labelled rows): {meta.get('judge_model')} agrees with "
            f"people at balanced accuracy {ba_text}; table: judge_calibration/data.parquet")


_TABLES = (
    "scored_conversations",
    "claim_table",
    "daily_answer_quality",
    "raw_conversations",
    "extracted_claims",
    "judged_claims",
)


def _rows(table_dir: Path) -> int:
    files = sorted(table_dir.glob("ds=*/data.parquet"))
    return int(pl.scan_parquet(files).select(pl.len()).collect().item()) if files else 0


def _mean(frame: pl.DataFrame, column: str) -> float:
    value = frame.get_column(column).mean()
    return float(value) if isinstance(value, int | float) else float("nan")


def _summary(result: DemoResult) -> str:
    scored = pl.read_parquet(result.warehouse / "scored_conversations" / "**" / "*.parquet", hive_partitioning=True)
    ok = scored.filter(pl.col("status") == "ok")
    span = f"{result.partitions[0]} .. {result.partitions[-1]}" if result.partitions else "no days"
    judge = ", ".join(sorted(scored.get_column("judge_model").unique().to_list()))
    nothing = scored.filter(pl.col("result_source") == "none").height  # empty answers: no claims to judge
    lines = [
        f"Scored {scored.height} rows ({scored.height - nothing} answers judged, {nothing} with no answer to judge) "
        f"over {len(result.partitions)} day(s) ({span}) with {judge} in {result.seconds:.1f} s.",
        "",
        f"Tables (Parquet, one folder per day: <table>/ds=YYYY-MM-DD/data.parquet) under {result.warehouse}:",
    ]
    lines += [f"  {table:<22} {rows:>6} rows" for table, rows in result.rows.items()]
    lines += [
        f"BI database (DuckDB views over the tables): {result.duckdb}",
        f"Report (self-contained HTML, open it in a browser): {result.report}",
        f"Dagster instance (runs, checks, metadata):  {result.dagster_home}",
        "",
        f"Mean hallucination score {_mean(ok, 'hallucination_score'):.3f}, mean faithfulness "
        f"score {_mean(ok, 'faithfulness_score'):.3f} (hallucination: lower is better; "
        f"faithfulness: higher is better; {scored.height - ok.height} error row(s)).",
    ]
    if "language" in scored.columns:
        by_language = (
            ok.group_by("language")
            .agg(pl.len().alias("n"), pl.col("hallucination_score").mean(), pl.col("faithfulness_score").mean())
            .sort("language")
        )
        lines.append(
            "By language:  "
            + "   ".join(f"{lang} n={n} h={h:.2f} f={f:.2f}" for lang, n, h, f in by_language.iter_rows())
        )
    if result.ignored:
        # The baseline's note says "no model is set": here one is, and the demo leaves it out on purpose.
        lines.append(f"Not used by the demo, which always scores with the offline baseline judge (no key, no "
                     f"network) into Parquet: {', '.join(result.ignored)}. `faithfulness-pipeline score` and "
                     "`dg dev` use them. The baseline agrees with people only as a baseline (docs/judges.md).")
    elif (note := note_on(judge)) is not None:
        lines.append(f"Judge: {note}.")
    if result.calibration:
        lines.append(result.calibration)
    if result.failed_checks:
        lines += ["", "Failed checks:"] + [f"  {c}" for c in result.failed_checks]
    if result.warnings:
        lines += ["", "Warnings (checks with severity WARN):"] + [f"  {c}" for c in result.warnings]
    lines += ["", "Next (each command runs as printed, from any directory):"]
    lines += [f"  {label:<7} {command}" for label, command in hints(result)]
    return "\n".join(lines)


def hints(result: DemoResult) -> list[tuple[str, str]]:
    """The commands the demo suggests, as ``(label, shell command)``. They run through the project's own
    environment (``uv run`` from the repository), since duckdb and dg are installed there, not system-wide."""
    repo = shlex.quote(str(_REPO))
    query = (
        f"import duckdb; print(duckdb.connect(r'{result.duckdb}', read_only=True, "
        f"config={{'file_search_path': r'{result.warehouse}'}})"
        f".sql('SELECT day, model, answers, hallucination_mean, faithfulness_mean FROM daily_answer_quality "
        f"ORDER BY day, model'))"
    )
    home = shlex.quote(str(result.dagster_home))
    return [
        ("Query:", f'cd {repo} && uv run --frozen python -c "{query}"'),
        ("UI:", f"cd {repo} && DAGSTER_HOME={home} uv run --frozen dg dev -h 127.0.0.1 -p 3000"),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo and print the summary; exit status 1 when a check failed."""
    del argv  # no options: configuration is by environment variable (see the module docstring)
    result = run_demo(progress=lambda line: click.echo(line, err=True))
    print(_summary(result))
    return 1 if result.failed_checks else 0


@click.command()
def demo() -> None:
    """Materialise every Dagster asset for every sample day with the offline judge, then print a summary."""
    sys.exit(main([]))


if __name__ == "__main__":
    sys.exit(main())
