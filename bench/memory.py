"""Peak memory of the CLI scoring 100,000 and 1,000,000 rows: flat in row count.

Two judges: the offline judge, and the litellm judge on a warm result store (every result stored, so
zero requests: the path of a nightly re-run over rows scored before).

Each size runs ``faithfulness-pipeline score in.parquet -o out.parquet`` in a child process (chunks of
the default size) with the offline judge as shipped: the CLI process and its worker processes. The CLI's peak
is its ``ru_maxrss`` from ``wait4``; each worker's is its VmHWM, read from /proc while it runs; the total
adds them. Typical RAG rows would take minutes at a million, so these rows are short, built with polars
expressions (no Python loop): a one-sentence answer and one short passage, English, Chinese and Korean
in turn, one answer in five with a number the passage does not state. Both input files have row groups
of 100,000 rows (the reader holds one at a time).

The warm-store inputs repeat the contents of their first 1,000 rows under distinct conversation ids. The
store is filled by scoring those 1,000 rows against the fake LLM server (a child process); then both
sizes are scored against the same server, which must see no request.

    .venv/bin/python bench/memory.py [--small 100000] [--large 1000000] [--processes N] [--no-warm]
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
from common import FAKE_KEY_ENV, ROOT, machine
from overhead import BENCH_MODEL, ServerProcess

from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.judging.offline.judge import default_processes

CHUNK_ROWS = ScoringConfig().chunk_rows

TARGET_RATIO = 1.5
ROW_GROUP_ROWS = 100_000
WARM_PERIOD = 1_000  # distinct contents in the warm-store inputs


def short_rows(n: int, period: int | None = None) -> pl.DataFrame:
    """``n`` short rows: conversation_id, input, output (the answer), context (one passage).

    With ``period``, row i has the contents of row i % period (its conversation_id stays its own).
    """
    ids = pl.int_range(0, n, dtype=pl.Int64)
    i = ids % period if period else ids
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
        pl.format("mem-{}", ids).alias("conversation_id"),
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


def _score(path: Path, out: Path, processes: int | None, judge_args: tuple[str, ...] = ()) -> dict[str, Any]:
    """Runs the CLI on ``path``; its peak RSS and CPU time and those of its worker processes."""
    env = dict(os.environ)
    if processes is not None:
        env["FAITHFULNESS_OFFLINE_PROCESSES"] = str(processes)
    command = [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(path), "-o", str(out), "--quiet",
               *judge_args]
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


def _warm(tmp: Path, small: int, large: int) -> dict[str, Any]:
    """Both sizes scored by the litellm judge from a store that holds every result: zero requests."""
    paths = {name: tmp / f"warm-{name}.parquet" for name in ("seed", "small", "large")}
    subprocess.run([sys.executable, __file__, "--generate-warm", str(WARM_PERIOD), str(WARM_PERIOD),
                    str(paths["seed"]), str(small), str(paths["small"]), str(large), str(paths["large"])],
                   check=True, cwd=ROOT)  # fmt: skip
    found: dict[str, Any] = {}
    with ServerProcess() as server:
        judge_args = ("--model", BENCH_MODEL, "--api-base", server.base_url, "--api-key-env", FAKE_KEY_ENV,
                      "--store", str(tmp / "store.sqlite"))  # fmt: skip
        _score(paths["seed"], tmp / "warm-seed.scored.parquet", None, judge_args)
        found["fill_requests"] = server.stats()["requests"]
        for name, n in {"small": small, "large": large}.items():
            before = server.stats()["requests"]
            found[name] = {"rows": n, **_score(paths[name], tmp / f"warm-{name}.scored.parquet", None, judge_args)}
            found[name]["requests"] = server.stats()["requests"] - before
            paths[name].unlink()
    found["ratio"] = found["large"]["total_peak_mb"] / found["small"]["total_peak_mb"]
    return found


def run(small: int = 100_000, large: int = 1_000_000, processes: int | None = None,
        warm: bool = True) -> dict[str, Any]:
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
        if warm:
            result["warm"] = _warm(Path(tmp), small, large)
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
    warm = result.get("warm")

    def row(r: dict[str, Any]) -> str:
        workers = f"{r['workers']} × {r['worker_peak_mb']:.0f}" if r["workers"] else "none"
        return (f"| {r['rows']:,} | {r['scored_rows']:,} | {r['wall_s']:.1f} | {r['main_cpu_s']:.1f} + "
                f"{r['worker_cpu_s']:.1f} | {r['main_peak_mb']:.0f} | {workers} | **{r['total_peak_mb']:.0f}** |")

    return "\n".join([
        "## Memory: flat in row count",
        "",
        "`.venv/bin/python bench/memory.py` — `faithfulness-pipeline score in.parquet -o out.parquet` in a child "
        f"process with the offline judge as shipped ({result['processes']} processes: the CLI and its worker "
        f"processes), chunks of {CHUNK_ROWS:,} rows (the default). Peak RSS: the CLI's `ru_maxrss` and each worker's VmHWM; the total "
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
        *(_warm_report(warm, result["target_ratio"], row) if warm else []),
    ])


def _warm_report(warm: dict[str, Any], target: float, row: Any) -> list[str]:
    met = "met" if warm["ratio"] <= target and not (warm["small"]["requests"] or warm["large"]["requests"]) \
        else "NOT met"
    return [
        "",
        "Warm result store (litellm judge, `--model ... --store`, every result already stored): the inputs "
        f"repeat {WARM_PERIOD:,} distinct contents under distinct conversation ids; the store was filled by "
        f"scoring those rows against the fake server ({warm['fill_requests']} requests), then each size was "
        "scored against the same server.",
        "",
        "| input rows | scored rows | wall s | CPU s: CLI + workers | CLI peak MB | worker peak MB | total peak MB |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        row(warm["small"]),
        row(warm["large"]),
        "",
        f"Requests while re-scoring: {warm['small']['requests']} and {warm['large']['requests']}. 1M / 100k peak "
        f"RSS: **{warm['ratio']:.2f}×** (target ≤ {target}× with zero requests: {met}).",
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--processes", type=int, default=None, help="offline judge processes (default: as shipped)")
    parser.add_argument("--no-warm", action="store_true", help="skip the warm-store runs")
    parser.add_argument("--generate", nargs="+", metavar="ROWS PATH", help=argparse.SUPPRESS)
    parser.add_argument("--generate-warm", nargs="+", metavar="PERIOD ROWS PATH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate_warm:
        period, rest = int(args.generate_warm[0]), args.generate_warm[1:]
        wanted = [(int(n), path) for n, path in zip(rest[::2], rest[1::2], strict=True)]
        rows = short_rows(max(n for n, _ in wanted), period)
        for n, path in wanted:
            rows.head(n).write_parquet(path, row_group_size=ROW_GROUP_ROWS)
    elif args.generate:
        wanted = [(int(n), path) for n, path in zip(args.generate[::2], args.generate[1::2], strict=True)]
        rows = short_rows(max(n for n, _ in wanted))
        for n, path in wanted:  # the rows depend on their index only: a head is a smaller input
            rows.head(n).write_parquet(path, row_group_size=ROW_GROUP_ROWS)
    else:
        print(report(run(args.small, args.large, args.processes, warm=not args.no_warm)))
