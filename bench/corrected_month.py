"""Peak memory of `faithfulness-pipeline estimate` (the corrected figures) over one day and over a month.

The scored tables are bench/report_month.py's: ``--distinct`` typical RAG rows (``bench/rag_rows.py``) scored
once by the offline judge, copied under new row keys into days of ``--per-day`` answers (three answering
models), one table of one day and one of ``--days`` days, written a row group at a time in a child process.
Beside each, a labels table: ``--label-share`` of each day's row keys drawn at random (seed ``--seed``), with
``label_hallucinated`` drawn from the judge's own flag (people agree with a flag 80 % of the time and call an
unflagged answer hallucinated 10 % of the time), so the corrected figure differs from the raw one. Each is
estimated by `python -m faithfulness_pipeline.cli estimate TABLE --labels LABELS -o figures.parquet` in a
child process; its peak is the child's ``ru_maxrss`` (``wait4``). ``--before REF`` also runs the estimate of
an older commit (its ``faithfulness_pipeline`` by ``git archive``, on the same environment) on the same tables,
and says whether its figures equal ours.

    .venv/bin/python bench/corrected_month.py [--distinct 20000] [--per-day 100000] [--days 30] [--before REF]
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

import numpy as np
import polars as pl
from common import (
    ROOT,
    child_peak,
    day_and_month_header,
    day_and_month_row,
    day_frame,
    machine,
    machine_line,
    write_day_and_month,
)

#: The issue's bound on the month's corrected figures.
TARGET_GB = 1.0
#: People's label given the judge's flag: P(hallucinated | flagged), P(hallucinated | not flagged).
AGREE_FLAGGED, CALLED_UNFLAGGED = 0.8, 0.1


def labels_of(scored: pl.DataFrame, days: int, per_day: int, share: float, seed: int) -> pl.DataFrame:
    """``share`` of each day's answers drawn at random, with a label drawn from the judge's flag on it."""
    rng = np.random.default_rng(seed)
    frames = []
    for day in range(days):
        rows = day_frame(scored, day, per_day).select("row_key", "hallucination_score")
        picked = np.sort(rng.choice(rows.height, round(rows.height * share), replace=False))
        sample = rows[picked]
        flagged = (sample.get_column("hallucination_score").fill_null(0.0) > 0.5).to_numpy()
        label = rng.random(len(picked)) < np.where(flagged, AGREE_FLAGGED, CALLED_UNFLAGGED)
        frames.append(sample.select("row_key").with_columns(pl.Series("label_hallucinated", label)))
    return pl.concat(frames)


def write_tables(folder: Path, distinct: int, per_day: int, days: int, share: float, seed: int) -> None:
    """The 1-day and ``days``-day scored tables and their labels tables into ``folder`` (the child)."""
    scored, figures = write_day_and_month(folder, distinct, per_day, days)
    for n in sorted({1, days}):
        labels = labels_of(scored, n, per_day, share, seed)
        labels.write_parquet(folder / f"{n}_labels.parquet")
        figures[f"labels_{n}"] = labels.height
    (folder / "tables.json").write_text(json.dumps(figures))


def run_estimate(table: Path, labels: Path, out: Path, code: Path = ROOT) -> dict[str, Any]:
    """The corrected figures of ``table`` by the code at ``code`` in a child process: its peak RSS, wall time
    and the figures' table."""
    command = [sys.executable, "-m", "faithfulness_pipeline.cli", "estimate", str(table), "--labels", str(labels),
               "-o", str(out)]
    figures = child_peak(command, code, f"estimate of {table} by {code}")
    frame = pl.read_parquet(out)
    return {"peak_gb": figures["peak_gb"], "seconds": figures["seconds"], "groups": frame.height,
            "figures": frame.select("model", "language", "answers", "labelled_answers", "over_threshold_share",
                                    "over_threshold_share_corrected", "over_threshold_share_corrected_low",
                                    "over_threshold_share_corrected_high").to_dicts()}


def _same_figures(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> float | None:
    """The largest difference between two runs' figures, None where their groups or counts differ."""
    if [(r["model"], r["language"], r["answers"], r["labelled_answers"]) for r in a] != \
            [(r["model"], r["language"], r["answers"], r["labelled_answers"]) for r in b]:
        return None
    return max(abs(x[k] - y[k]) for x, y in zip(a, b, strict=True) for k in x if isinstance(x[k], float))


def run(distinct: int, per_day: int, days: int, share: float, seed: int, before: str | None) -> dict[str, Any]:
    result: dict[str, Any] = {"distinct": distinct, "per_day": per_day, "days": days, "share": share, "seed": seed,
                              "machine": machine(), "runs": [], "before": before}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        folder = Path(tmp)
        subprocess.run([sys.executable, __file__, "--write-tables", str(folder), "--distinct", str(distinct),
                        "--per-day", str(per_day), "--days", str(days), "--label-share", str(share),
                        "--seed", str(seed)], check=True)
        result |= json.loads((folder / "tables.json").read_text())
        codes = {"now": ROOT}
        if before:
            codes[before] = folder / "before"
            codes[before].mkdir()
            archive = subprocess.run(["git", "archive", before, "faithfulness_pipeline"], cwd=ROOT, check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(codes[before])], input=archive, check=True)
        for name, code in codes.items():
            for n in sorted({1, days}):
                figures = run_estimate(folder / f"{n}_days.parquet", folder / f"{n}_labels.parquet",
                                       folder / f"{name}_{n}_figures.parquet", code)
                result["runs"].append({"code": name, "days": n, **figures})
                print(f"{name}: {n} day(s): {figures['peak_gb']:.2f} GB, {figures['seconds']:.1f} s",
                      file=sys.stderr, flush=True)
        if before:
            now = next(r for r in result["runs"] if r["code"] == "now" and r["days"] == days)
            then = next(r for r in result["runs"] if r["code"] == before and r["days"] == days)
            result["largest_difference"] = _same_figures(now["figures"], then["figures"])
    result["load_average"] = os.getloadavg()[0]
    return result


def report(result: dict[str, Any]) -> str:
    days = result["days"]
    month = next(r for r in result["runs"] if r["code"] == "now" and r["days"] == days)
    within = month["peak_gb"] < TARGET_GB
    lines = [
        "## Corrected figures over a month: peak memory (issue 51)",
        "",
        f"`.venv/bin/python bench/corrected_month.py --distinct {result['distinct']} --per-day {result['per_day']} "
        f"--days {days}{' --before ' + result['before'] if result['before'] else ''}`: bench/report_month.py's scored tables ({result['distinct']:,} typical answers scored by "
        f"the offline judge, copied under new row keys into days of {result['per_day']:,} answers, three models): "
        f"1 day ({result['rows_1']:,} rows, {result['bytes_1'] / 2**20:.0f} MiB) and {days} days "
        f"({result[f'rows_{days}']:,} rows, {result[f'bytes_{days}'] / 2**20:.0f} MiB), each with a labels table of "
        f"{result['share']:.0%} of its row keys drawn at random (seed {result['seed']}: {result['labels_1']:,} and "
        f"{result[f'labels_{days}']:,} labels; `label_hallucinated` drawn from the judge's flag, 0.8 where it "
        "flags, 0.1 where not). Each is estimated by `faithfulness-pipeline estimate TABLE --labels LABELS -o "
        "figures.parquet` in a child process (peak: its ru_maxrss); --by model,language, "
        f"{month['groups']} groups.",
        "",
        *day_and_month_header("code", days),
    ]
    for code in dict.fromkeys(r["code"] for r in result["runs"]):
        runs = {r["days"]: r for r in result["runs"] if r["code"] == code}
        lines.append(day_and_month_row(code, runs[1], runs[days], wall_digits=1, target=None))
    if result["before"]:
        difference = result["largest_difference"]
        lines += ["", f"The {days}-day figures of both: " + (
            "groups or counts differ" if difference is None else
            f"the same groups and counts, the largest difference of a figure {difference:.1e}") + "."]
    lines += [
        "",
        f"The month's peak: {month['peak_gb']:.2f} GB (target < {TARGET_GB:.0f} GB: "
        f"{'met' if within else 'NOT met'}).",
        "",
        f"The share over the threshold of the {days}-day table, per group: the judge's, corrected, interval:",
        "",
        "| model | language | answers | labelled | judge's share | corrected | 95 % interval |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for g in month["figures"]:
        lines.append(f"| {g['model']} | {g['language']} | {g['answers']:,} | {g['labelled_answers']:,} | "
                     f"{g['over_threshold_share']:.3f} | {g['over_threshold_share_corrected']:.3f} | "
                     f"{g['over_threshold_share_corrected_low']:.3f} – {g['over_threshold_share_corrected_high']:.3f} |")
    lines += ["", machine_line(result)]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--distinct", type=int, default=20_000, help="typical answers scored by the offline judge")
    parser.add_argument("--per-day", type=int, default=100_000, help="answers per day")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--label-share", type=float, default=0.01, help="share of each day's answers labelled")
    parser.add_argument("--seed", type=int, default=51)
    parser.add_argument("--before", default=None, help="also estimate with this older commit's code")
    parser.add_argument("--write-tables", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write_tables is not None:
        write_tables(args.write_tables, args.distinct, args.per_day, args.days, args.label_share, args.seed)
    else:
        print(report(run(args.distinct, args.per_day, args.days, args.label_share, args.seed, args.before)))
