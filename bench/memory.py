"""Peak memory of the CLI scoring 100,000 and 1,000,000 rows with the offline judge: flat in row count.

Each size runs ``faithfulness-pipeline score in.parquet -o out.parquet`` in a child process, chunks of
5,000 rows, the offline judge in that one process (``FAITHFULNESS_OFFLINE_PROCESSES=1``, so the child's
peak RSS is the whole footprint; ``bench/offline_speed.py`` reports what a worker process adds). The peak
is the child's ``ru_maxrss`` from ``wait4``. Typical RAG rows would take minutes at a million, so these
rows are short, built with polars expressions (no Python loop): a one-sentence answer and one short
passage, English, Chinese and Korean in turn, one answer in five with a number the passage does
not state. Both input files have row groups of 100,000 rows (the reader holds one at a time). The two
sizes run at the same time, one core each.

    .venv/bin/python bench/memory.py [--small 100000] [--large 1000000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl
from common import ROOT, machine

TARGET_RATIO = 1.5
ROW_GROUP_ROWS = 100_000


def short_rows(n: int) -> pl.DataFrame:
    """``n`` short rows: conversation_id, input, output (the answer), context (one passage)."""
    i = pl.int_range(0, n, dtype=pl.Int64)
    year = (1990 + i % 36).cast(pl.String)
    count = (2 + (i * 7919) % 900).cast(pl.String)
    said = pl.when(i % 5 == 4).then((3 + (i * 7919) % 900).cast(pl.String)).otherwise(count)  # 1 in 5 differs
    subject = pl.lit(["The library", "The museum", "The airline", "The hospital", "The city council"]).list.get(
        i % 5
    )
    zh_subject = pl.lit(["图书馆", "博物馆", "航空公司", "医院", "市议会"]).list.get(i % 5)
    ko_subject = pl.lit(["도서관은", "박물관은", "항공사는", "병원은", "시의회는"]).list.get(i % 5)
    answer = (
        pl.when(i % 3 == 0)
        .then(pl.concat_str(subject, pl.lit(" opened in "), year, pl.lit(" and served "), said, pl.lit(" people.")))
        .when(i % 3 == 1)
        .then(pl.concat_str(zh_subject, pl.lit("于"), year, pl.lit("年开放，服务"), said, pl.lit("人。")))
        .otherwise(pl.concat_str(ko_subject, pl.lit(" "), year, pl.lit("년에 문을 열었고 이용자는 "), said,
                                 pl.lit("명이다.")))
    )
    passage = (
        pl.when(i % 3 == 0)
        .then(pl.concat_str(subject, pl.lit(" opened in "), year, pl.lit(" after a long review. It served "),
                            count, pl.lit(" people in its first year.")))
        .when(i % 3 == 1)
        .then(pl.concat_str(zh_subject, pl.lit("经过长期审查于"), year, pl.lit("年开放，第一年服务"), count,
                            pl.lit("人。")))
        .otherwise(pl.concat_str(ko_subject, pl.lit(" 오랜 검토 끝에 "), year, pl.lit("년에 문을 열었다. 첫해 이용자는 "),
                                 count, pl.lit("명이었다.")))
    )
    return pl.select(
        pl.format("mem-{}", i).alias("conversation_id"),
        pl.lit("What happened?").alias("input"),
        answer.alias("output"),
        pl.concat_list(passage).alias("context"),
    )


def _start(path: Path, out: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "FAITHFULNESS_OFFLINE_PROCESSES": "1"}
    command = [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(path), "-o", str(out), "--quiet"]
    with open(log, "wb") as errors:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=errors)


def _rss_mb() -> float:
    status = Path("/proc/self/status")
    if not status.exists():
        return float("nan")
    line = next(x for x in status.read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def run(small: int = 100_000, large: int = 1_000_000) -> dict[str, Any]:
    sizes = {"small": small, "large": large}
    result: dict[str, Any] = {"machine": machine(), "row_group_rows": ROW_GROUP_ROWS}
    with tempfile.TemporaryDirectory() as tmp:
        children: dict[int, tuple[str, subprocess.Popen[bytes], float]] = {}
        for name, n in sizes.items():
            # In a child: a child's ru_maxrss starts at its parent's RSS when it was started (Linux keeps
            # the high-water mark across exec), so this process must stay small.
            started = time.perf_counter()
            path = (Path(tmp) / name).with_suffix(".parquet")
            subprocess.run([sys.executable, __file__, "--generate", str(n), str(path)], check=True, cwd=ROOT)
            result[f"{name}_generate_s"] = time.perf_counter() - started
        result["parent_rss_mb"] = _rss_mb()
        for name in sizes:
            base = Path(tmp) / name
            child = _start(base.with_suffix(".parquet"), base.with_suffix(".scored.parquet"), base.with_suffix(".log"))
            children[child.pid] = (name, child, time.perf_counter())
        while children:
            pid, status, usage = os.wait4(-1, 0)
            if pid not in children:
                continue
            name, child, started = children.pop(pid)
            child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
            if child.returncode != 0:
                log = (Path(tmp) / name).with_suffix(".log").read_text(errors="replace")
                raise RuntimeError(f"scoring the {name} input failed: {log[-2000:]}")
            scored = pl.scan_parquet((Path(tmp) / name).with_suffix(".scored.parquet")).select(pl.len()).collect().item()
            result[name] = {"rows": sizes[name], "scored_rows": scored, "wall_s": time.perf_counter() - started,
                            "peak_rss_mb": usage.ru_maxrss / 1024}
    result["ratio"] = result["large"]["peak_rss_mb"] / result["small"]["peak_rss_mb"]
    result["bytes_per_extra_row"] = (
        (result["large"]["peak_rss_mb"] - result["small"]["peak_rss_mb"]) * 2**20 / (large - small)
    )
    result["target_ratio"] = TARGET_RATIO
    return result


def report(result: dict[str, Any]) -> str:
    small, large = result["small"], result["large"]
    met = "met" if result["ratio"] <= result["target_ratio"] else "NOT met"
    return "\n".join([
        "## Memory: flat in row count",
        "",
        "`.venv/bin/python bench/memory.py` — `faithfulness-pipeline score in.parquet -o out.parquet` in a child "
        "process (chunks of 5,000 rows, offline judge in that one process), peak RSS = the child's `ru_maxrss`. "
        "Short rows (a one-sentence answer and one short passage, en/zh/ko in turn, built with polars "
        "expressions) because a million typical rows would take minutes; input row groups of "
        f"{result['row_group_rows']:,} rows. Both sizes run at the same time.",
        "",
        f"The benchmark process was at {result['parent_rss_mb']:.0f} MB when it started them (a child's "
        "`ru_maxrss` cannot be lower than that, so it must stay small).",
        "",
        "| input rows | scored rows | wall s | peak RSS MB |",
        "|---:|---:|---:|---:|",
        f"| {small['rows']:,} | {small['scored_rows']:,} | {small['wall_s']:.1f} | {small['peak_rss_mb']:.0f} |",
        f"| {large['rows']:,} | {large['scored_rows']:,} | {large['wall_s']:.1f} | {large['peak_rss_mb']:.0f} |",
        "",
        f"1M / 100k peak RSS: **{result['ratio']:.2f}×** (target ≤ {result['target_ratio']}×: {met}); "
        f"{result['bytes_per_extra_row']:.0f} bytes per extra row (the duplicate-key registry keeps an 8-byte "
        "hash per row).",
    ])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--generate", nargs=2, metavar=("ROWS", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate:
        short_rows(int(args.generate[0])).write_parquet(args.generate[1], row_group_size=ROW_GROUP_ROWS)
    else:
        print(report(run(args.small, args.large)))
