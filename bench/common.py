"""Shared benchmark plumbing: repo imports, offline litellm settings, a judge against the fake server."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
for _name, _value in {"LITELLM_OFFLINE_MODE": "true", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                      "LITELLM_LOG": "ERROR", "HF_HUB_OFFLINE": "1"}.items():
    os.environ.setdefault(_name, _value)

import polars as pl  # noqa: E402

from faithfulness_pipeline.api import score_frame_async  # noqa: E402
from faithfulness_pipeline.core.config import ScoringConfig  # noqa: E402
from faithfulness_pipeline.core.port import Judge  # noqa: E402

FAKE_KEY_ENV = "FP_BENCH_KEY"
#: Rows of a day or month table written at a time (a row group each): never the month in one frame.
WRITE_ROWS = 100_000
os.environ.setdefault(FAKE_KEY_ENV, "sk-bench-not-a-secret")


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def machine_line(result: dict[str, Any]) -> str:
    """The report's last line: the machine and how busy it was (other work skews every timing)."""
    return (f"Machine: {result['machine']}; 1-minute load average at the end {result['load_average']:.1f} (the "
            "benchmark's own processes account for up to 2 of it; more means other work competed for the CPUs).")


def day_and_month_header(first: str, days: int) -> list[str]:
    """The head of a table of peaks over one day and over ``days`` days, a row per ``first`` (a step, a commit)."""
    return [f"| {first} | 1 day: peak | 1 day: wall | {days} days: peak | {days} days: wall | peak {days} days / 1 day |",
            "|---|---:|---:|---:|---:|---:|"]


def day_and_month_row(label: str, one: dict[str, Any], month: dict[str, Any], *, wall_digits: int,
                      target: float | None) -> str:
    """A row of that table from the two runs' ``peak_gb`` and ``seconds``; with ``target``, whether the month's
    peak over the day's stays within it."""
    growth = month["peak_gb"] / one["peak_gb"]
    mark = "" if target is None else f" (target ≤ {target:.1f}: {'met' if growth <= target else 'NOT met'})"
    return (f"| {label} | {one['peak_gb']:.2f} GB | {one['seconds']:.{wall_digits}f} s | {month['peak_gb']:.2f} GB | "
            f"{month['seconds']:.{wall_digits}f} s | x{growth:.2f}{mark} |")


def add_pack_options(parser: argparse.ArgumentParser) -> None:
    """--pack-tokens / --max-items: run a bench at another pack budget than the judge's default."""
    parser.add_argument("--pack-tokens", type=int, default=None)
    parser.add_argument("--max-items", type=int, default=None)


def pack_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The judge settings :func:`add_pack_options` asked for (none: the defaults)."""
    overrides: dict[str, Any] = {}
    if args.pack_tokens:
        overrides["pack_tokens"] = args.pack_tokens
    if args.max_items:
        overrides["max_items_per_pack"] = args.max_items
    return overrides


def litellm_judge(base_url: str, **overrides: Any) -> Judge:
    from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
    from faithfulness_pipeline.settings.judge import JudgeSettings

    # Whole replies: the fake server stands in for a vendor's API, which --stream auto does not stream; behind
    # an api_base auto would stream, and measure litellm's cost per piece instead.
    overrides.setdefault("stream", "no")
    config = JudgeSettings(model="openai/bench-judge", api_base=base_url, api_key_env=FAKE_KEY_ENV,
                                **overrides)
    judge: Judge = LiteLLMJudge(config)
    return judge


def score(df: pl.DataFrame, judge: Judge, config: ScoringConfig | None = None) -> pl.DataFrame:
    """``df`` scored with ``judge``, which is closed after (``score_frame_async`` does)."""
    return asyncio.run(score_frame_async(df, judge, config or ScoringConfig()))


def sample_rows() -> pl.DataFrame:
    """The repo's sample data, both shapes, as one flat frame (answers and contexts resolved)."""
    from faithfulness_pipeline.core import schema as S
    from faithfulness_pipeline.core.normalize import prepare

    frames = []
    for path in sorted((ROOT / "sample_data").rglob("*.parquet")):
        prepared = prepare(pl.read_parquet(path), ScoringConfig())
        frames.append(prepared.select(
            pl.col(S.ROW_KEY).alias("conversation_id"), pl.col(S.QUESTION).alias("input"),
            pl.col(S.ANSWER).alias("output"), pl.col(S.CONTEXT).alias("context")))
    return pl.concat(frames)


def day_frame(scored: pl.DataFrame, day: int, per_day: int) -> pl.DataFrame:
    """``per_day`` copies of the scored rows on day ``day``, each under a row key of its own (``d{day}-{i}``),
    the answering model ``model-{i % 3}``."""
    repeats = -(-per_day // scored.height)
    frame = pl.concat([scored] * repeats).head(per_day)
    index = pl.int_range(pl.len())
    start = dt.datetime(2026, 11, 1, 12, tzinfo=dt.UTC) + dt.timedelta(days=day)
    key = pl.format("d{}-{}", pl.lit(day), index)
    return frame.with_columns(key.alias("conversation_id"), key.alias("row_key"), pl.lit(start).alias("created_at"),
                              pl.format("model-{}", index % 3).alias("model"))


def write_table(scored: pl.DataFrame, days: int, per_day: int, path: Path) -> int:
    """``days`` days of :func:`day_frame` written to one Parquet file, a row group at a time."""
    import pyarrow.parquet as pq

    writer: pq.ParquetWriter | None = None
    rows = 0
    try:
        for day in range(days):
            for part in day_frame(scored, day, per_day).iter_slices(WRITE_ROWS):
                table = part.to_arrow()
                writer = writer or pq.ParquetWriter(path, table.schema, compression="zstd")
                writer.write_table(table, row_group_size=WRITE_ROWS)
                rows += part.height
    finally:
        if writer is not None:
            writer.close()
    return rows


def write_day_and_month(folder: Path, distinct: int, per_day: int, days: int) -> tuple[pl.DataFrame, dict[str, Any]]:
    """``distinct`` typical RAG rows scored by the offline judge, written as ``folder/1_days.parquet`` and
    ``folder/{days}_days.parquet``; the scored rows and the figures (scoring time, rows and bytes of each).
    Run it in a child process: the benchmark's own process stays small."""
    from rag_rows import make_rows

    from faithfulness_pipeline import score_frame

    started = time.perf_counter()
    scored = score_frame(make_rows(distinct, seed=11))
    figures: dict[str, Any] = {"scoring_s": time.perf_counter() - started}
    for n in sorted({1, days}):
        table = folder / f"{n}_days.parquet"
        figures[f"rows_{n}"] = write_table(scored, n, per_day, table)
        figures[f"bytes_{n}"] = table.stat().st_size
    return scored, figures


def child_peak(command: list[str], code: Path, what: str) -> dict[str, Any]:
    """``command`` run in a child process with the code at ``code`` first on its path: its peak RSS (the
    child's ``ru_maxrss``, by ``wait4``), wall time and output; ``what`` names it when it fails."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=code, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{what} failed:\n{out.decode(errors='replace')[-3000:]}")
    return {"peak_gb": usage.ru_maxrss / 1024 / 1024, "seconds": seconds, "output": out.decode(errors="replace")}
