"""Peak memory of `faithfulness-pipeline compare` over one day and over a month of scored answers a side.

The scored tables are ``bench/report_month.py``'s (``--distinct`` typical RAG rows in en/zh/ko scored once by
the offline judge, copied under new row keys into days of ``--per-day`` answers, three models), written by it
in a child process. Each comparison pairs a table with its own copy on the row key, every row paired, so the
join is as large as it gets; it runs as `python -m faithfulness_pipeline.cli compare A B` in a child process
whose peak is its ``ru_maxrss`` (``wait4``). ``--before REF`` also runs an older commit's code (a ``git
worktree`` of REF on the same environment) on the same tables.

    .venv/bin/python bench/compare_month.py [--distinct 20000] [--per-day 100000] [--days 30] [--before REF]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, day_and_month_header, day_and_month_row, machine, machine_line

#: The issue's target (52): a month of 3,000,000 scored rows a side compares in under this many GB.
TARGET_GB = 1.0


def run_compare(baseline: Path, candidate: Path, code: Path) -> dict[str, Any]:
    """``compare baseline candidate`` by the code at ``code`` in a child process: its peak RSS and wall time."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    command = [sys.executable, "-m", "faithfulness_pipeline.cli", "compare", str(baseline), str(candidate)]
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=code, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    code_or_signal = os.waitstatus_to_exitcode(status)
    if code_or_signal != 0 and code != ROOT:  # an older commit may not get through a month: record how it ended
        print(f"compare by {code} ended with {code_or_signal}: {out.decode(errors='replace')[-500:]}", flush=True)
    elif code_or_signal != 0:
        raise RuntimeError(f"compare by {code} failed:\n{out.decode(errors='replace')[-3000:]}")
    return {"peak_gb": usage.ru_maxrss / 1024 / 1024, "seconds": seconds, "exit": code_or_signal}


def run(distinct: int, per_day: int, days: int, before: str | None) -> dict[str, Any]:
    result: dict[str, Any] = {"distinct": distinct, "per_day": per_day, "days": days, "machine": machine(),
                              "runs": []}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        folder = Path(tmp)
        subprocess.run([sys.executable, str(Path(__file__).with_name("report_month.py")), "--write-tables",
                        str(folder), "--distinct", str(distinct), "--per-day", str(per_day), "--days", str(days)],
                       check=True)
        result |= json.loads((folder / "tables.json").read_text())
        tables = {n: folder / f"{n}_days.parquet" for n in sorted({1, days})}
        copies = {n: folder / f"{n}_days_copy.parquet" for n in tables}
        for n, table in tables.items():
            os.link(table, copies[n])  # another name for the same bytes: two inputs, no second 3 GiB on disk
        codes = {"now": ROOT}
        if before:
            codes[before] = folder / "before"
            subprocess.run(["git", "worktree", "add", "--detach", str(codes[before]), before], cwd=ROOT, check=True,
                           capture_output=True)
        try:
            for name, code in codes.items():
                for n, table in tables.items():
                    figures = run_compare(table, copies[n], code)
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
        "# compare over a month: peak memory",
        "",
        f"`.venv/bin/python bench/compare_month.py --distinct {result['distinct']} --per-day {result['per_day']} "
        f"--days {days}`: the scored tables of `bench/report_month.py` (1 day: {result['rows_1']:,} rows, "
        f"{result['bytes_1'] / 2**20:.0f} MiB; {days} days: {result[f'rows_{days}']:,} rows, "
        f"{result[f'bytes_{days}'] / 2**20:.0f} MiB), each compared with a copy of itself, every row paired on "
        "the row key, by `faithfulness-pipeline compare A B` in a child process (peak: its ru_maxrss). Target: "
        f"the month under {TARGET_GB:g} GB.",
        "",
        *day_and_month_header("code", days),
    ]
    for code in dict.fromkeys(r["code"] for r in result["runs"]):
        one = next(r for r in result["runs"] if r["code"] == code and r["days"] == 1)
        month = next(r for r in result["runs"] if r["code"] == code and r["days"] == days)
        lines.append(day_and_month_row(code, one, month, wall_digits=0, target=None))
        for run in (one, month):
            if run["exit"]:
                lines.append(f"| {code}: {run['days']} day(s) did not finish (exit {run['exit']}; a negative exit is the "
                             "signal that ended it) | | | | | |")
        if code == "now":
            lines.append("")
            lines.append(f"The month's peak: {month['peak_gb']:.2f} GB (target under {TARGET_GB:g} GB: "
                         f"{'met' if month['peak_gb'] < TARGET_GB else 'NOT met'}).")
    lines += ["", machine_line(result)]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--distinct", type=int, default=20_000, help="typical answers scored by the offline judge")
    parser.add_argument("--per-day", type=int, default=100_000, help="answers per day")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--before", default=None, help="also compare with this older commit's code")
    args = parser.parse_args()
    print(report(run(args.distinct, args.per_day, args.days, args.before)))
    sys.exit(0)
