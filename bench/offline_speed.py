"""Offline judge speed: answers/s end to end through the pipeline, in one process and in several.

Typical RAG rows from ``bench/rag_rows.py`` (3–6 sentence answers, 3–8 passages of 60–150 words; English,
Chinese and Korean in thirds). Generating rows in Python is slower than scoring them, so ``--distinct``
rows are generated once and repeated under new conversation_ids up to ``--rows``: the offline judge keeps
nothing per row, so a repeated row costs what a new one does. Measured:

* the judge alone, per language, on one core (CPU time of claims + verdicts, no pipeline);
* the pipeline in one process: ``score_chunks`` (prepare -> claims -> verdicts -> scores, chunks of
  the default size) over the distinct rows;
* the pipeline as shipped: the offline judge's default processes (the usable cores, here shared
  between this process and worker processes) over all ``--rows`` rows, wall clock, worker start included.

The one-process and the default runs must give identical verdicts and scores on the rows they share.

    .venv/bin/python bench/offline_speed.py [--rows 100000] [--distinct 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path
from typing import Any

import polars as pl
from common import machine
from rag_rows import make_rows

from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.pipeline import chunks_of, score_chunks
from faithfulness_pipeline.judging.offline.judge import OfflineJudge, default_processes
from faithfulness_pipeline.judging.offline.rules import extract_claims, judge_claims

TARGET_ANSWERS_PER_S = 2000
_COMPARED = ["claims", "verdicts", "hallucination_score", "faithfulness_score", "status"]


def repeated(rows: int, distinct: int, seed: int = 5) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``distinct`` generated rows, and ``rows`` rows repeating them under new conversation_ids."""
    base = make_rows(distinct, seed=seed)
    big = pl.concat([base] * -(-rows // distinct)).head(rows)
    return base, big.with_columns(pl.format("speed-{}", pl.int_range(pl.len(), dtype=pl.Int64)).alias("conversation_id"))


def judge_alone(base: pl.DataFrame, per_language: int = 1500) -> dict[str, float]:
    """Answers/s of claims + verdicts per language on one core (CPU time)."""
    out: dict[str, float] = {}
    for lang in ("en", "zh", "ko"):
        rows = base.filter(pl.col("language") == lang).head(per_language).select("output", "context").rows()
        started = time.process_time()
        for answer, context in rows:
            judge_claims(extract_claims(answer), context)
        out[lang] = len(rows) / (time.process_time() - started)
    return out


def _descendants() -> dict[int, tuple[float, float]]:
    """Peak RSS (MB) and CPU seconds of each descendant of this process (the judge's workers), from
    /proc; empty where there is no /proc."""
    def children(pid: int) -> list[int]:
        found: list[int] = []
        for task in Path(f"/proc/{pid}/task").glob("*/children"):
            found += [int(x) for x in task.read_text().split()]
        return found

    out: dict[int, tuple[float, float]] = {}
    try:
        todo = children(os.getpid())
        while todo:
            pid = todo.pop()
            todo += children(pid)
            status = Path(f"/proc/{pid}/status").read_text()
            peak = next(int(x.split()[1]) / 1024 for x in status.splitlines() if x.startswith("VmHWM"))
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[pid] = (peak, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
    except (OSError, StopIteration, ValueError):
        pass
    return out


async def _pipeline(df: pl.DataFrame, processes: int, keep: int) -> dict[str, Any]:
    judge = OfflineJudge(processes=processes)
    config = ScoringConfig()
    kept: list[pl.DataFrame] = []
    done = 0
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        async for scored in score_chunks(chunks_of(df, config.chunk_rows), judge, config):
            if done < keep:
                kept.append(scored.select(_COMPARED).head(keep - done))
            done += scored.height
        cpu = time.process_time() - cpu
        workers = [w for w in _descendants().values() if w[0] > 20]  # the fork server itself is a few MB
    finally:
        await judge.aclose()
    wall = time.perf_counter() - wall
    busiest = max([cpu, *(w[1] for w in workers)])
    return {"processes": processes, "rows": done, "wall_s": wall, "cpu_s": cpu, "answers_per_s": done / wall,
            "worker_cpu_s": sum(w[1] for w in workers), "worker_peak_rss_mb": max((w[0] for w in workers), default=None),
            # what the run would reach with a core to each process: the busiest one sets the pace
            "answers_per_busiest_cpu_s": done / busiest if busiest else None, "kept": pl.concat(kept)}


def run(rows: int = 100_000, distinct: int = 10_000) -> dict[str, Any]:
    load_at_start = os.getloadavg()
    started = time.perf_counter()
    base, big = repeated(rows, distinct)
    generated = time.perf_counter() - started
    alone = judge_alone(base)
    one = asyncio.run(_pipeline(base, processes=1, keep=distinct))
    default = asyncio.run(_pipeline(big, processes=default_processes(), keep=distinct))
    same = one.pop("kept").equals(default.pop("kept"))
    if not same:
        raise AssertionError("the default (parallel) run gave other verdicts or scores than the one-process run")
    return {
        "rows": rows, "distinct": distinct, "generate_s": generated, "judge_alone": alone,
        "one_process": one, "default": default, "identical": same,
        "target_answers_per_s": TARGET_ANSWERS_PER_S, "machine": machine(), "load_at_start": load_at_start,
        "load": os.getloadavg(),
    }


def report(result: dict[str, Any]) -> str:
    one, default = result["one_process"], result["default"]
    alone = result["judge_alone"]
    met = "met" if default["answers_per_s"] >= result["target_answers_per_s"] else "NOT met"
    worker = default["worker_peak_rss_mb"]
    worker_note = f"; each worker process peaked at {worker:.0f} MB RSS" if worker else ""
    load = ", ".join(f"{x:.1f}" for x in result["load"])
    load_at_start = ", ".join(f"{x:.1f}" for x in result["load_at_start"])
    return "\n".join([
        "## Offline judge speed",
        "",
        "`.venv/bin/python bench/offline_speed.py` — typical RAG rows (`bench/rag_rows.py`: 3–6 sentence "
        "answers, 3–8 passages of 60–150 words, en/zh/ko in thirds) scored end to end through "
        f"`score_chunks` (prepare -> claims -> verdicts -> scores, chunks of {ScoringConfig().chunk_rows:,} rows, "
        "no Parquet I/O) with "
        f"the offline judge. {result['distinct']:,} distinct rows were generated "
        f"({result['generate_s']:.0f} s) and repeated under new conversation_ids up to {result['rows']:,} rows "
        "(the judge keeps nothing per row, so a repeat costs what a new row does).",
        "",
        "| run | processes | rows | wall s | CPU s: this process + workers | answers/s (wall) | "
        "answers per CPU s of the busiest process | target |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        f"| one process | 1 | {one['rows']:,} | {one['wall_s']:.1f} | {one['cpu_s']:.1f} | "
        f"{one['answers_per_s']:,.0f} | {one['answers_per_busiest_cpu_s']:,.0f} | |",
        f"| as shipped (default processes) | {default['processes']} | {default['rows']:,} | "
        f"{default['wall_s']:.1f} | {default['cpu_s']:.1f} + {default['worker_cpu_s']:.1f} | "
        f"**{default['answers_per_s']:,.0f}** | {default['answers_per_busiest_cpu_s']:,.0f} | "
        f"≥ {result['target_answers_per_s']:,} ({met}) |",
        "",
        "The last rate column is what the run reaches when each process has a core to itself (on a shared "
        "machine the wall-clock rate is lower); the target applies to the wall-clock rate.",
        "",
        f"Judge alone, one core (claims + verdicts, CPU time): en {alone['en']:,.0f}, zh {alone['zh']:,.0f}, "
        f"ko {alone['ko']:,.0f} answers/s.",
        "",
        f"The default run shares each chunk's verdicts between this process and {default['processes'] - 1} "
        f"worker process(es){worker_note}; its verdicts and scores on the {result['distinct']:,} rows both "
        f"runs share are identical to the one-process run ({'checked' if result['identical'] else 'DIFFER'}). "
        f"Load average (1, 5, 15 min) at the start of the run: {load_at_start}; at the end: {load} (the machine "
        "may be shared: with more runnable processes than cores, the wall-clock rate falls, and the CPU-time "
        "columns rise a little (shared caches) but much less).",
    ])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--distinct", type=int, default=10_000)
    args = parser.parse_args()
    print(report(run(args.rows, args.distinct)))
