"""Warm re-run: re-scoring answers whose results are all in the result store (zero requests).

The store is keyed by content (step, prompt version, model and settings, the answer / claims and
passages), not by row id. So we score one chunk's worth (the default chunk size) of distinct typical
RAG rows once against the fake server to fill a store, then re-score 100,000 rows that repeat those
contents under distinct conversation_ids:
every step result is a store hit, and the run must send nothing. Timed end to end through
``score_frame_async`` with the litellm judge (default chunks, both steps, scores and reasons).

One chunk's worth: no content repeats inside a chunk, so the lookups (which ask each distinct key of a
chunk once) cost what re-scoring 100,000 different answers would.

    .venv/bin/python bench/warm_rerun.py [--rows 100000] [--distinct N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl
from common import machine, machine_line, score
from overhead import BENCH_MODEL, bench_judge
from rag_rows import make_rows

from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.pipeline import chunks_of, score_chunks
from faithfulness_pipeline.core.port import Judging, RowCache
from faithfulness_pipeline.judging.stack import JudgeStack
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge

TARGET_ANSWERS_PER_S = 50_000
CHUNK_ROWS = ScoringConfig().chunk_rows


class TimedJudge:
    """A judge stack's port and row cache, adding up the wall time spent inside each: whole chunks of rows
    (the row cache: store lookups, decoding, keeping rows) and the per-item steps of what is not stored.
    Scored through :meth:`judging`, as a real run hands the stack to the core."""

    def __init__(self, stack: JudgeStack) -> None:
        self.stack = stack
        self.model_name = stack.model_name
        self.prompt_version = stack.prompt_version
        self.seconds = {"rows": 0.0, "extract": 0.0, "verdict": 0.0}

    def judging(self) -> Judging:
        inner = self.stack.judging()
        rows = None if inner.rows is None else TimedRows(inner.rows, self.seconds)
        return Judging(self, rows, inner.overlap_rows)

    async def extract_claims(self, items: Any, hooks: Any = None) -> Any:
        start = time.perf_counter()
        try:
            return await self.stack.extract_claims(items, hooks)
        finally:
            self.seconds["extract"] += time.perf_counter() - start

    async def judge_claims(self, items: Any, hooks: Any = None) -> Any:
        start = time.perf_counter()
        try:
            return await self.stack.judge_claims(items, hooks)
        finally:
            self.seconds["verdict"] += time.perf_counter() - start

    def stats(self) -> Any:
        return self.stack.stats()

    async def aclose(self) -> None:
        await self.stack.aclose()


class TimedRows:
    """A row cache, its two calls timed into ``seconds['rows']`` (they run on worker threads)."""

    def __init__(self, rows: RowCache, seconds: dict[str, float]) -> None:
        self.rows = rows
        self.seconds = seconds

    def find(self, rows: pl.DataFrame) -> pl.DataFrame | None:
        start = time.perf_counter()
        try:
            return self.rows.find(rows)
        finally:
            self.seconds["rows"] += time.perf_counter() - start

    def keep(self, rows: pl.DataFrame, results: pl.DataFrame) -> None:
        start = time.perf_counter()
        try:
            self.rows.keep(rows, results)
        finally:
            self.seconds["rows"] += time.perf_counter() - start


def score_timed(df: pl.DataFrame, judge: TimedJudge) -> pl.DataFrame:
    """``df`` scored through the timed port and row cache, as ``score_frame_async`` scores it."""

    async def run() -> pl.DataFrame:
        config = ScoringConfig()
        try:
            parts = [p async for p in score_chunks(chunks_of(df, config.chunk_rows), judge.judging(), config)]
            return pl.concat(parts, how="vertical")
        finally:
            await judge.aclose()

    return asyncio.run(run())


def repeated(rows: int, distinct: int, seed: int = 41) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``distinct`` rows, and ``rows`` rows repeating their contents under new conversation_ids."""
    base = make_rows(distinct, seed=seed)
    copies = -(-rows // distinct)
    big = pl.concat([base] * copies).head(rows)
    big = big.with_columns(pl.format("warm-{}", pl.int_range(pl.len(), dtype=pl.Int64)).alias("conversation_id"))
    return base, big


def run(rows: int = 100_000, distinct: int = CHUNK_ROWS) -> dict[str, Any]:
    base, big = repeated(rows, distinct)
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(ScriptedJudge(grounded=True)) as server:
        store = Path(tmp) / "results.sqlite"
        cold_start = time.perf_counter()
        cold_table = score(base, bench_judge(server.base_url, store_path=store))
        cold = time.perf_counter() - cold_start
        paid = server.stats().requests
        server.reset_stats()
        judge = TimedJudge(bench_judge(server.base_url, store_path=store))
        start, cpu_start = time.perf_counter(), time.process_time()
        scored = score_timed(big, judge)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        stats = judge.stats()
        requests = server.stats().requests
    ok = scored.filter(pl.col("status") == "ok").height
    # The warm rows must be the cold rows, column for column, but for what names a row or a run.
    own = ["conversation_id", "row_key", "scored_at"]
    same = scored.head(base.height).drop(own, strict=False).equals(cold_table.drop(own, strict=False))
    return {
        "identical_to_cold": same,
        "rows": big.height,
        "distinct_contents": distinct,
        "fill_requests": paid,
        "fill_s": cold,
        "requests": requests,
        "cached_items": stats.cached_items,
        "ok_rows": ok,
        "wall_s": wall,
        "cpu_s": cpu,
        "judge_rows_s": judge.seconds["rows"],
        "judge_extract_s": judge.seconds["extract"],
        "judge_verdict_s": judge.seconds["verdict"],
        "answers_per_s": big.height / wall,
        "target_answers_per_s": TARGET_ANSWERS_PER_S,
        "model": BENCH_MODEL,
        "machine": machine(),
        "load_average": os.getloadavg()[0],  # other processes on the machine skew timings: say so
    }


def report(result: dict[str, Any]) -> str:
    met = "met" if result["answers_per_s"] >= result["target_answers_per_s"] and result["requests"] == 0 else "MISSED"
    same = "identical" if result["identical_to_cold"] else "NOT identical"
    judge_s = result["judge_rows_s"] + result["judge_extract_s"] + result["judge_verdict_s"]
    return "\n".join([
        "## Warm re-run from the result store",
        "",
        "`.venv/bin/python bench/warm_rerun.py` — the store is keyed by content, not row id: "
        f"{result['distinct_contents']:,} distinct typical RAG rows were scored once against the fake server "
        f"({result['fill_requests']} requests, {result['fill_s']:.1f} s) to fill it, then {result['rows']:,} rows "
        "repeating those contents under distinct conversation_ids were re-scored end to end "
        f"(`score_frame_async`, litellm judge, chunks of {CHUNK_ROWS:,} rows, the default): every step result is "
        "a store hit. "
        "The distinct rows are one chunk's worth, so no content repeats inside a chunk and every lookup "
        "costs what it would for 100,000 different answers.",
        "",
        "| rows | requests | step results from the store | ok rows | wall s | CPU s (all threads) | "
        "in the judge stack s (whole chunks + per-item claims + verdicts, summed over overlapping chunks) | "
        "answers/s | target |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {result['rows']:,} | {result['requests']} | {result['cached_items']:,} | {result['ok_rows']:,} | "
        f"{result['wall_s']:.2f} | {result['cpu_s']:.2f} | {judge_s:.2f} ({result['judge_rows_s']:.2f} + "
        f"{result['judge_extract_s']:.2f} + {result['judge_verdict_s']:.2f}) | **{result['answers_per_s']:,.0f}** | "
        f"≥ {result['target_answers_per_s']:,} with 0 requests ({met}) |",
        "",
        f"Every column of the re-scored rows but conversation_id, row_key and scored_at is {same} to the cold "
        "run's table (checked on the rows that repeat the cold rows).",
        "",
        "Finished rows are kept whole in the store, so a re-run finds each row with one key, one lookup and "
        "one decode (claims and verdicts are looked up step by step only for rows without a whole entry). "
        "The store lookups (key hashing, SQLite, decoding) run on a worker thread while the "
        "chunk before is scored on another and the next one prepared on a third, so the judge stack's seconds "
        "overlap the rest and the columns do not add up to the wall time.",
        "",
        machine_line(result),
    ])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--distinct", type=int, default=CHUNK_ROWS)
    args = parser.parse_args()
    print(report(run(args.rows, args.distinct)))
