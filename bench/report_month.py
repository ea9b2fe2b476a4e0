"""Peak memory of `faithfulness-pipeline report` over one day and over a month of the same days.

``--distinct`` typical RAG rows (``bench/rag_rows.py``, en/zh/ko) are scored once by the offline judge, then
copied under new row keys into days of ``--per-day`` answers (three answering models), and written as one
scored table, a row group of 100,000 rows at a time (never the month in this process): one table of one
day, one of ``--days`` days, in a child process (a child's ``ru_maxrss`` starts at its parent's RSS, so this
process stays small). Each is reported by `python -m faithfulness_pipeline.cli report TABLE -o
page.html` in a child process; its peak is the child's ``ru_maxrss`` (``wait4``). ``--before REF`` also runs
the report of an older commit (a ``git worktree`` of REF on the same environment) on the same tables.

    .venv/bin/python bench/report_month.py [--distinct 20000] [--per-day 100000] [--days 30] [--before REF]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import (
    ROOT,
    child_peak,
    day_and_month_header,
    day_and_month_row,
    machine,
    machine_line,
    write_day_and_month,
)

#: The issue's target: the month's peak over one day's, at most this.
TARGET_GROWTH = 1.5


def run_report(table: Path, page: Path, code: Path) -> dict[str, Any]:
    """The report of ``table`` by the code at ``code`` in a child process: its peak RSS and wall time."""
    command = [sys.executable, "-m", "faithfulness_pipeline.cli", "report", str(table), "-o", str(page)]
    figures = child_peak(command, code, f"report of {table} by {code}")
    return {"peak_gb": figures["peak_gb"], "seconds": figures["seconds"], "page_bytes": page.stat().st_size}


def write_tables(folder: Path, distinct: int, per_day: int, days: int) -> None:
    """Score the distinct rows and write the 1-day and the ``days``-day tables into ``folder`` (the child)."""
    _, figures = write_day_and_month(folder, distinct, per_day, days)
    (folder / "tables.json").write_text(json.dumps(figures))


def run(distinct: int, per_day: int, days: int, before: str | None) -> dict[str, Any]:
    result: dict[str, Any] = {"distinct": distinct, "per_day": per_day, "days": days, "machine": machine(),
                              "runs": []}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        folder = Path(tmp)
        subprocess.run([sys.executable, __file__, "--write-tables", str(folder), "--distinct", str(distinct),
                        "--per-day", str(per_day), "--days", str(days)], check=True)
        result |= json.loads((folder / "tables.json").read_text())
        tables = {n: folder / f"{n}_days.parquet" for n in sorted({1, days})}
        codes = {"now": ROOT}
        if before:
            codes[before] = folder / "before"
            subprocess.run(["git", "worktree", "add", "--detach", str(codes[before]), before], cwd=ROOT, check=True,
                           capture_output=True)
        try:
            for name, code in codes.items():
                for n, table in tables.items():
                    figures = run_report(table, folder / f"{name}_{n}.html", code)
                    result["runs"].append({"code": name, "days": n, **figures})
                    print(f"{name}: {n} day(s): {figures['peak_gb']:.2f} GB, {figures['seconds']:.1f} s", flush=True)
        finally:
            if before:
                subprocess.run(["git", "worktree", "remove", "--force", str(codes[before])], cwd=ROOT, check=False)
    result["load_average"] = os.getloadavg()[0]
    return result


def report(result: dict[str, Any]) -> str:
    days = result["days"]
    lines = [
        "# Report over a month: peak memory",
        "",
        f"`.venv/bin/python bench/report_month.py --distinct {result['distinct']} --per-day {result['per_day']} "
        f"--days {days}`: {result['distinct']:,} typical answers scored by the offline judge "
        f"({result['scoring_s']:.0f} s), copied under new row keys into days of {result['per_day']:,} answers, "
        f"three models; one scored table of 1 day ({result['rows_1']:,} rows, {result['bytes_1'] / 2**20:.0f} MiB) "
        f"and one of {days} days ({result[f'rows_{days}']:,} rows, {result[f'bytes_{days}'] / 2**20:.0f} MiB), "
        "each reported by `faithfulness-pipeline report TABLE -o page.html` in a child process (peak: its "
        "ru_maxrss).",
        "",
        *day_and_month_header("code", days),
    ]
    for code in dict.fromkeys(r["code"] for r in result["runs"]):
        one = next(r for r in result["runs"] if r["code"] == code and r["days"] == 1)
        month = next(r for r in result["runs"] if r["code"] == code and r["days"] == days)
        lines.append(day_and_month_row(code, one, month, wall_digits=0,
                                       target=TARGET_GROWTH if code == "now" else None))
    lines += ["", machine_line(result)]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--distinct", type=int, default=20_000, help="typical answers scored by the offline judge")
    parser.add_argument("--per-day", type=int, default=100_000, help="answers per day")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--before", default=None, help="also report with this older commit's code")
    parser.add_argument("--write-tables", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write_tables is not None:
        write_tables(args.write_tables, args.distinct, args.per_day, args.days)
    else:
        print(report(run(args.distinct, args.per_day, args.days, args.before)))
