"""The quickstart: run the Dagster job for every day of the sample data with the offline judge.

``python -m faithfulness_pipeline.demo`` (the CLI's ``faithfulness-pipeline demo``) materialises every asset
and check of the ``score_conversations`` job, one run per day, records the runs in the local Dagster
instance (so ``dagster dev`` shows them afterwards), then prints where the tables are and a summary.

Defaults, each overridable by its environment variable: ``DAGSTER_HOME`` = the repository's
``dagster_home`` (absolute), ``FP_WAREHOUSE`` = ``./warehouse``, ``FP_LANDING`` = the repository's
``sample_data``. The judge is always the offline one here: the demo needs no key and no network.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

_REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class DemoResult:
    warehouse: Path
    duckdb: Path
    dagster_home: Path
    partitions: list[str]
    rows: dict[str, int]
    failed_checks: list[str]
    seconds: float
    report: Path | None = None


def _default_home() -> Path:
    bundled = _REPO / "dagster_home"
    return bundled if (bundled / "dagster.yaml").exists() else Path.cwd() / "dagster_home"


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
    warehouse: Path | None = None, landing: Path | None = None, dagster_home: Path | None = None
) -> DemoResult:
    """Materialise every asset for every day of the landing data; returns what was written."""
    home = (dagster_home or Path(os.environ.get("DAGSTER_HOME") or _default_home())).resolve()
    home.mkdir(parents=True, exist_ok=True)
    _ensure_instance_config(home)
    os.environ["DAGSTER_HOME"] = str(home)  # the instance must be found by this process and by `dagster dev`

    import dagster as dg  # after DAGSTER_HOME is set

    from faithfulness_pipeline.defs import DefsSettings, build_defs
    from faithfulness_pipeline.defs.landing import file_days, list_landing
    from faithfulness_pipeline.defs.partitions import daily_partitions
    from faithfulness_pipeline.defs.schedules import JOB

    root = (warehouse or Path(os.environ.get("FP_WAREHOUSE") or "warehouse")).resolve()
    source = (landing or Path(os.environ.get("FP_LANDING") or _default_landing())).resolve()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP_JUDGE_")}  # the offline judge
    env.update(FP_WAREHOUSE=str(root), FP_LANDING=str(source))
    settings = DefsSettings.from_env(env)
    defs = build_defs(settings)
    keys = set(daily_partitions(settings.partitions_start, settings.landing.zone()).get_partition_keys())
    resource = settings.landing
    days = sorted(
        {
            d.isoformat()
            for f in list_landing(resource.path)
            for d in file_days(f, resource.timestamp_column, resource.undated(), resource.zone())
        }
        & keys
    )
    job = defs.resolve_job_def(JOB)
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    failed: list[str] = []
    started = time.monotonic()
    with dg.DagsterInstance.get() as instance:
        for day in days:
            result = job.execute_in_process(partition_key=day, instance=instance, run_config=quiet)
            failed += [
                f"{day} {e.asset_key.to_user_string()}.{e.check_name}: {e.description or 'failed'}"
                for e in result.get_asset_check_evaluations()
                if not e.passed
            ]
    elapsed = time.monotonic() - started
    rows = {table: _rows(root / table) for table in _TABLES}
    return DemoResult(root, settings.warehouse.duckdb_file(), home, days, rows, failed, elapsed,
                      settings.warehouse.report_file())


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
    lines = [
        f"Scored {scored.height} answers over {len(result.partitions)} day(s) ({span}) with {judge} "
        f"in {result.seconds:.1f} s.",
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
    if result.failed_checks:
        lines += ["", "Failed checks:"] + [f"  {c}" for c in result.failed_checks]
    lines += [
        "",
        f"Query:  python -c \"import duckdb; print(duckdb.connect(r'{result.duckdb}', read_only=True, "
        f"config={{'file_search_path': r'{result.warehouse}'}}).sql('SELECT * FROM daily_answer_quality "
        f"ORDER BY day, model'))\"",
        f'UI:     DAGSTER_HOME="{result.dagster_home}" dagster dev -h 127.0.0.1 -p 3000   (from the repository root)',
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo and print the summary; exit status 1 when a check failed."""
    del argv  # no options: configuration is by environment variable (see the module docstring)
    result = run_demo()
    print(_summary(result))
    return 1 if result.failed_checks else 0


if __name__ == "__main__":
    sys.exit(main())
