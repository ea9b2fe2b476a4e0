"""Warm re-run: re-scoring answers whose results are all in the result store (zero requests).

The store is keyed by content (step, prompt version, model and settings, the answer / claims and
passages), not by row id. So we score 1,000 distinct typical RAG rows once against the fake server to
fill a store, then re-score 100,000 rows that repeat those contents under distinct conversation_ids:
every step result is a store hit, and the run must send nothing. Timed end to end through
``score_frame_async`` with the litellm judge (chunks of 5,000 rows, both steps, scores and reasons).

    .venv/bin/python bench/warm_rerun.py [--rows 100000] [--distinct 1000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl
from common import machine, score
from overhead import BENCH_MODEL, bench_judge
from rag_rows import make_rows

from tests.fakellm import FakeLLMServer
from tests.fakellm.scripted import ScriptedJudge

TARGET_ANSWERS_PER_S = 50_000


def repeated(rows: int, distinct: int, seed: int = 41) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``distinct`` rows, and ``rows`` rows repeating their contents under new conversation_ids."""
    base = make_rows(distinct, seed=seed)
    copies = -(-rows // distinct)
    big = pl.concat([base] * copies).head(rows)
    big = big.with_columns(pl.format("warm-{}", pl.int_range(pl.len(), dtype=pl.Int64)).alias("conversation_id"))
    return base, big


def run(rows: int = 100_000, distinct: int = 1000) -> dict[str, Any]:
    base, big = repeated(rows, distinct)
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(ScriptedJudge(grounded=True)) as server:
        store = Path(tmp) / "results.sqlite"
        cold_start = time.perf_counter()
        score(base, bench_judge(server.base_url, store_path=store))
        cold = time.perf_counter() - cold_start
        paid = server.stats().requests
        server.reset_stats()
        judge = bench_judge(server.base_url, store_path=store)
        start = time.perf_counter()
        scored = score(big, judge)
        wall = time.perf_counter() - start
        stats = judge.stats()
        requests = server.stats().requests
    ok = scored.filter(pl.col("status") == "ok").height
    return {
        "rows": big.height,
        "distinct_contents": distinct,
        "fill_requests": paid,
        "fill_s": cold,
        "requests": requests,
        "cached_items": stats.cached_items,
        "ok_rows": ok,
        "wall_s": wall,
        "answers_per_s": big.height / wall,
        "target_answers_per_s": TARGET_ANSWERS_PER_S,
        "model": BENCH_MODEL,
        "machine": machine(),
    }


def report(result: dict[str, Any]) -> str:
    met = "met" if result["answers_per_s"] >= result["target_answers_per_s"] and result["requests"] == 0 else "MISSED"
    return "\n".join([
        "## Warm re-run from the result store",
        "",
        "`.venv/bin/python bench/warm_rerun.py` — the store is keyed by content, not row id: "
        f"{result['distinct_contents']:,} distinct typical RAG rows were scored once against the fake server "
        f"({result['fill_requests']} requests, {result['fill_s']:.1f} s) to fill it, then {result['rows']:,} rows "
        "repeating those contents under distinct conversation_ids were re-scored end to end "
        "(`score_frame_async`, litellm judge, chunks of 5,000 rows): every step result is a store hit.",
        "",
        "| rows | requests | step results from the store | ok rows | wall s | answers/s | target |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {result['rows']:,} | {result['requests']} | {result['cached_items']:,} | {result['ok_rows']:,} | "
        f"{result['wall_s']:.2f} | **{result['answers_per_s']:,.0f}** | ≥ {result['target_answers_per_s']:,} "
        f"with 0 requests ({met}) |",
    ])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--distinct", type=int, default=1000)
    args = parser.parse_args()
    print(report(run(args.rows, args.distinct)))
