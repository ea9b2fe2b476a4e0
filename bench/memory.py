"""Peak memory of the CLI scoring 100,000 and 1,000,000 rows with the offline judge: flat in row count.

Each size runs ``faithfulness-pipeline score in.parquet -o out.parquet`` in a child process (chunks of
5,000 rows) with the offline judge as shipped: the CLI process and its worker processes. The CLI's peak
is its ``ru_maxrss`` from ``wait4``; each worker's is its VmHWM, read from /proc while it runs; the total
adds them. Typical RAG rows would take minutes at a million, so these rows are short, built with polars
expressions (no Python loop): a one-sentence answer and one short passage, English, Chinese and Korean
in turn, one answer in five with a number the passage does not state. Both input files have row groups
of 100,000 rows (the reader holds one at a time).

    .venv/bin/python bench/memory.py [--small 100000] [--large 1000000] [--processes N]
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

from faithfulness_pipeline.judges.offline import default_processes

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


def _tree(pid: int) -> dict[int, tuple[float, float]]:
    """Peak RSS (VmHWM, MB) and CPU seconds so far of a process and of each of its descendants, from
    /proc."""
    found: dict[int, tuple[float, float]] = {}
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            peak = next(int(x.split()[1]) / 1024 for x in status.splitlines() if x.startswith("VmHWM:"))
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            found[current] = (peak, (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS)
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(x) for x in (task / "children").read_text().split()]
        except (OSError, ValueError, StopIteration):
            continue  # it just ended
    return found


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _score(path: Path, out: Path, processes: int | None) -> dict[str, Any]:
    """Runs the CLI on ``path``; its peak RSS and CPU time and those of its worker processes."""
    env = dict(os.environ)
    if processes is not None:
        env["FAITHFULNESS_OFFLINE_PROCESSES"] = str(processes)
    command = [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(path), "-o", str(out), "--quiet"]
    started = time.perf_counter()
    with open(out.with_suffix(".log"), "wb") as errors:
        child = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=errors)
    seen: dict[int, tuple[float, float]] = {}
    while True:
        for pid, (peak, cpu) in _tree(child.pid).items():
            before = seen.get(pid, (0.0, 0.0))
            seen[pid] = (max(before[0], peak), max(before[1], cpu))
        done, status, usage = os.wait4(child.pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    if child.returncode != 0:
        raise RuntimeError(f"scoring {path.name} failed: {out.with_suffix('.log').read_text(errors='replace')[-2000:]}")
    # ru_maxrss is exact for the CLI process (the largest of its tree); polling may miss its last moments.
    main = max(usage.ru_maxrss / 1024, seen.pop(child.pid, (0.0, 0.0))[0])
    workers = [w for w in seen.values() if w[0] > 20]  # the fork server itself is a few MB
    scored = pl.scan_parquet(out).select(pl.len()).collect().item()
    return {"scored_rows": scored, "wall_s": wall, "main_peak_mb": main,
            "worker_peak_mb": max((w[0] for w in workers), default=0.0), "workers": len(workers),
            "total_peak_mb": main + sum(w[0] for w in workers),
            # the CLI's own CPU (its reaped children's is in ru_*time of the parent, not here)
            "main_cpu_s": usage.ru_utime + usage.ru_stime,
            # polled every 50 ms: a lower bound by at most that much per worker
            "worker_cpu_s": sum(w[1] for w in workers)}


def _rss_mb() -> float:
    status = Path("/proc/self/status")
    if not status.exists():
        return float("nan")
    line = next(x for x in status.read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def run(small: int = 100_000, large: int = 1_000_000, processes: int | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"machine": machine(), "row_group_rows": ROW_GROUP_ROWS,
                              "processes": processes or default_processes()}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {name: Path(tmp) / f"{name}.parquet" for name in ("small", "large")}
        # The inputs are made in a child: a child's ru_maxrss starts at its parent's RSS when it was
        # started (Linux keeps the high-water mark across exec), so this process must stay small. One
        # child writes both (the small input is the first rows of the large one): one start, one build.
        started = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--generate", str(small), str(paths["small"]), str(large),
                        str(paths["large"])], check=True, cwd=ROOT)
        result["generate_s"] = time.perf_counter() - started
        for name, n in {"small": small, "large": large}.items():
            result["parent_rss_mb"] = _rss_mb()
            result[name] = {"rows": n, **_score(paths[name], (Path(tmp) / name).with_suffix(".scored.parquet"),
                                                processes)}
            paths[name].unlink()
    small_total, large_total = result["small"]["total_peak_mb"], result["large"]["total_peak_mb"]
    result["ratio"] = large_total / small_total
    result["main_ratio"] = result["large"]["main_peak_mb"] / result["small"]["main_peak_mb"]
    result["bytes_per_extra_row"] = (large_total - small_total) * 2**20 / (large - small)
    result["target_ratio"] = TARGET_RATIO
    result["load"] = os.getloadavg()
    return result


def report(result: dict[str, Any]) -> str:
    small, large = result["small"], result["large"]
    met = "met" if result["ratio"] <= result["target_ratio"] else "NOT met"

    def row(r: dict[str, Any]) -> str:
        workers = f"{r['workers']} × {r['worker_peak_mb']:.0f}" if r["workers"] else "none"
        return (f"| {r['rows']:,} | {r['scored_rows']:,} | {r['wall_s']:.1f} | {r['main_cpu_s']:.1f} + "
                f"{r['worker_cpu_s']:.1f} | {r['main_peak_mb']:.0f} | {workers} | **{r['total_peak_mb']:.0f}** |")

    return "\n".join([
        "## Memory: flat in row count",
        "",
        "`.venv/bin/python bench/memory.py` — `faithfulness-pipeline score in.parquet -o out.parquet` in a child "
        f"process with the offline judge as shipped ({result['processes']} processes: the CLI and its worker "
        "processes), chunks of 5,000 rows. Peak RSS: the CLI's `ru_maxrss` and each worker's VmHWM; the total "
        "adds them (an upper bound). Short rows (a one-sentence answer and one short passage, en/zh/ko in turn, "
        "one answer in five with a number its passage does not state; built with polars expressions) because a "
        f"million typical rows would take minutes; input row groups of {result['row_group_rows']:,} rows. Both "
        f"inputs were written by one child process ({result['generate_s']:.0f} s; the {small['rows']:,} rows are the "
        f"first of the {large['rows']:,}) and scored one after the other.",
        "",
        "| input rows | scored rows | wall s | CPU s: CLI + workers | CLI peak MB | worker peak MB | total peak MB |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        row(small),
        row(large),
        "",
        f"1M / 100k total peak RSS: **{result['ratio']:.2f}×** (CLI process alone {result['main_ratio']:.2f}×; "
        f"target ≤ {result['target_ratio']}×: {met}); {result['bytes_per_extra_row']:.0f} bytes per extra row "
        "(the duplicate-key registry keeps an 8-byte hash per row). Peak RSS does not depend on how busy the "
        "machine is; wall and CPU seconds are given for scale only (there is no speed target here). "
        f"Load average at the end: {', '.join(f'{x:.1f}' for x in result['load'])}.",
    ])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--processes", type=int, default=None, help="offline judge processes (default: as shipped)")
    parser.add_argument("--generate", nargs="+", metavar="ROWS PATH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate:
        wanted = [(int(n), path) for n, path in zip(args.generate[::2], args.generate[1::2], strict=True)]
        rows = short_rows(max(n for n, _ in wanted))
        for n, path in wanted:  # the rows depend on their index only: a head is a smaller input
            rows.head(n).write_parquet(path, row_group_size=ROW_GROUP_ROWS)
    else:
        print(report(run(args.small, args.large, args.processes)))
