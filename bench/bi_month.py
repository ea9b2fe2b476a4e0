"""Peak memory of the BI database over one day and over a month of the same days.

One day of ``--per-day`` typical answers goes through ``dg launch`` with the offline judge
(``bench/dagster_day.py``'s landing file and run: ``bench/day_landing.py``, ``bench/dagster_runs.py``); its
warehouse is then laid out again as ``--days`` days: the partition files of ``scored_conversations`` and
``raw_conversations`` linked into one ``ds=`` folder per day (their day is the folder's), those of the tables
that carry a ``day`` column rewritten with that day. In a child process each (its peak: VmHWM):

- the build of ``answer_quality.duckdb`` (``defs.duckdb_views.build_database``: a view per table, its row count);
- each query of the views the module's docs give, made to read every row it selects (an aggregate over it, so
  what is measured is DuckDB reading and joining the month, not Python holding the answer).

    .venv/bin/python bench/bi_month.py [--per-day 100000] [--days 30] [--work DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl
from common import ROOT, day_and_month_header, day_and_month_row, machine, machine_line
from dagster_runs import Plan, run_day
from day_landing import CHUNK_ROWS, DAY, landing_file

#: The issue's target: a month's peak over a day's, at most this.
TARGET_GROWTH = 1.5

#: The queries of defs/duckdb_views.py's docs, each wrapped so that DuckDB reads every row it selects.
QUERIES = {
    "trend per model": "SELECT count(*), sum(hallucination_mean) FROM (SELECT day, model, answers, "
    "hallucination_mean, hallucination_p90, over_threshold_share, billed_cost_usd FROM daily_answer_quality "
    "ORDER BY day, model)",
    "scored joined to raw passages": "SELECT count(*), sum(len(r.context)) FROM scored_conversations s "
    "JOIN raw_conversations r USING (row_key, day) WHERE s.status = 'ok'",
    "model differences": "SELECT count(*) FROM (SELECT day, segment, score, group_by, \"group\", difference, "
    "low, high FROM daily_model_comparison WHERE verdict = 'larger than noise' ORDER BY day)",
    "contradicted claims with evidence": "SELECT count(*), sum(length(evidence)), sum(length(reason)) FROM "
    "(SELECT day, model, conversation_id, claim, reason, evidence FROM claim_table WHERE verdict = 'contradicted')",
}

#: Tables whose files carry their own ``day`` column (the others take it from the partition folder).
DAY_IN_FILE = ("claim_table", "daily_answer_quality", "daily_model_comparison")


def month(day_warehouse: Path, target: Path, days: int) -> dict[str, int]:
    """``day_warehouse``'s one day as ``days`` days under ``target``; the rows of each table in all."""
    first = dt.date.fromisoformat(DAY)
    rows: dict[str, int] = {}
    for table in sorted(p for p in day_warehouse.iterdir() if (p / f"ds={DAY}").is_dir()):
        source = table / f"ds={DAY}" / "data.parquet"
        if not source.exists():
            continue
        for n in range(days):
            day = first - dt.timedelta(days=n)
            folder = target / table.name / f"ds={day.isoformat()}"
            folder.mkdir(parents=True)
            if table.name in DAY_IN_FILE:
                frame = pl.scan_parquet(source)
                frame.with_columns(pl.lit(day).cast(frame.collect_schema()["day"]).alias("day")).sink_parquet(
                    folder / "data.parquet", compression="zstd")
            else:
                os.link(source, folder / "data.parquet")
            rows[table.name] = rows.get(table.name, 0) + pl.scan_parquet(folder / "data.parquet").select(
                pl.len()).collect().item()
    return rows


#: The child's last line: its own peak (VmHWM: a new program's, where ru_maxrss would start at this process's).
_PEAK = "; print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"


def child(code: str) -> dict[str, Any]:
    """``code`` run by a child process of this environment: its peak RSS and wall time."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code + _PEAK], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child failed:\n{done.stderr[-3000:]}")
    *out, peak_kb = done.stdout.strip().splitlines()
    return {"peak_gb": int(peak_kb) / 2**20, "seconds": time.perf_counter() - started, "out": "\n".join(out)}


def measure(warehouse: Path) -> dict[str, Any]:
    database = warehouse / "answer_quality.duckdb"
    database.unlink(missing_ok=True)
    build = child("from faithfulness_pipeline.defs.duckdb_views import build_database; import json; "
                  f"print(json.dumps(build_database({str(database)!r}, {str(warehouse)!r})))")
    figures: dict[str, Any] = {"build": build, "views": json.loads(build["out"].splitlines()[-1])}
    for name, sql in QUERIES.items():
        figures[name] = child(f"import duckdb; con = duckdb.connect({str(database)!r}, read_only=True, config="
                              f"{{'file_search_path': {str(warehouse)!r}}}); con.execute('SET enable_progress_bar = false'); "
                              f"print(con.execute({sql!r}).fetchall())")
    return figures


def run(per_day: int, days: int, work: Path) -> dict[str, Any]:
    result: dict[str, Any] = {"per_day": per_day, "days": days, "machine": machine()}
    landing = landing_file(work, per_day, CHUNK_ROWS)
    run_dir = work / f"bi-day-{per_day}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir()
    day = run_day(Plan(per_day, "offline", landing=landing), run_dir, None, None, 15.0, 3 * 3600)
    result["day_wall_s"] = day["wall_s"]
    warehouse = run_dir / "warehouse"
    month_warehouse = work / f"bi-month-{per_day}x{days}"
    shutil.rmtree(month_warehouse, ignore_errors=True)
    result["month_rows"] = month(warehouse, month_warehouse, days)
    for label, root in (("day", warehouse), ("month", month_warehouse)):
        result[label] = measure(root)
        print(f"{label}: build {result[label]['build']['peak_gb']:.2f} GB, "
              + ", ".join(f"{q} {result[label][q]['peak_gb']:.2f} GB" for q in QUERIES), file=sys.stderr, flush=True)
    result["load_average"] = os.getloadavg()[0]
    return result


def report(result: dict[str, Any]) -> str:
    days = result["days"]
    lines = [
        "# The BI database over a month: peak memory",
        "",
        f"`.venv/bin/python bench/bi_month.py --per-day {result['per_day']} --days {days}`: one day of "
        f"{result['per_day']:,} typical answers through `dg launch` (offline judge, {result['day_wall_s']:.0f} s), "
        f"its warehouse laid out again as {days} days ({result['month_rows'].get('scored_conversations', 0):,} "
        f"scored answers, {result['month_rows'].get('claim_table', 0):,} claims); each step in a child process "
        "(peak: its VmHWM).",
        "",
        *day_and_month_header("step", days),
    ]
    for step in ("build", *QUERIES):
        lines.append(day_and_month_row(step, result["day"][step], result["month"][step], wall_digits=1,
                                       target=TARGET_GROWTH))
    lines += ["", machine_line(result)]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--per-day", type=int, default=100_000, help="answers per day")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--work", type=Path, default=None, help="keep the landing file and warehouses here")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fp-bi-month-") as scratch:
        figures = run(args.per_day, args.days, args.work or Path(scratch))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=str), encoding="utf-8")
    print(report(figures))
