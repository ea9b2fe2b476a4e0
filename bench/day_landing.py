"""The landing file of a benchmark day: typical RAG rows (``bench/rag_rows.py``), every ``created_at`` on one day.

Built ``chunk_rows`` rows at a time, one row group per chunk; chunk k always holds the same rows, so a smaller
file is a prefix of a larger one and a larger one is built on a kept smaller one. ``landing_file`` and
``repeat_landing_file`` build them in a child process (the caller stays small: a child's ``ru_maxrss`` starts at
its parent's RSS), this module run as a script:

    .venv/bin/python bench/day_landing.py --generate ROWS PATH [--chunk-rows 10000]
    .venv/bin/python bench/day_landing.py --generate-repeat SOURCE ROWS PATH
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import ROOT

DAY = "2026-11-25"
CHUNK_ROWS = 10_000
SEED = 26_000
_TAG = b"fp_bench_rows"  # Parquet key-value metadata naming how a landing file was built


def _tag(seed: int, chunk_rows: int, repeat: int = 0) -> bytes:
    return f"rag_rows seed={seed} chunk={chunk_rows} repeat={repeat}".encode()


def _stamped(frame: Any, start: int) -> Any:
    """``frame`` with day-wide conversation ids and timestamps for its rows ``start``, ``start + 1``, ...

    Ids and times depend on the row's index only, so a smaller file is a prefix of a larger one."""
    from datetime import UTC, datetime

    import polars as pl

    index = pl.int_range(start, start + frame.height, dtype=pl.Int64)
    midnight = datetime.fromisoformat(DAY).replace(tzinfo=UTC)
    return frame.with_columns(
        pl.format("day-{}", index.cast(pl.String).str.zfill(7)).alias("conversation_id"),
        (pl.lit(midnight) + pl.duration(seconds=index % 86_400)).alias("created_at"),
    )


def _writer(path: Path, schema: Any, tag: bytes) -> Any:
    import pyarrow.parquet as pq

    # zstd as polars writes by default: 20,000 of these rows make the 13 MB landing file.
    return pq.ParquetWriter(path, schema.with_metadata({_TAG: tag}), compression="zstd")


def _built_rows(path: Path, tag: bytes) -> int:
    """Rows of ``path`` if it is a complete landing file built as ``tag`` says (0: none, or another build)."""
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(path)
    except (OSError, ValueError):
        return 0
    return int(meta.num_rows) if (meta.metadata or {}).get(_TAG) == tag else 0


def generate(rows: int, path: Path, chunk_rows: int, seed: int) -> None:
    """Writes ``rows`` typical RAG rows to ``path``, a chunk (one row group) at a time, starting from the
    largest smaller file built the same way next to it."""
    import pyarrow.parquet as pq
    from rag_rows import make_rows

    tag = _tag(seed, chunk_rows)
    # A kept file of whole chunks is the start of this one (chunk k holds the same rows in every file).
    kept = sorted((n, p) for p in path.parent.glob("landing-*.parquet") if p != path
                  if (n := _built_rows(p, tag)) and n < rows and n % chunk_rows == 0)[-1:]
    partial = path.with_suffix(".partial")
    writer = None
    done = 0
    try:
        if kept:
            done, source = kept[0]
            with pq.ParquetFile(source) as src:
                writer = _writer(partial, src.schema_arrow, tag)
                for group in range(src.num_row_groups):  # row group by row group: the copy stays small
                    writer.write_table(src.read_row_group(group))
        while done < rows:
            n = min(chunk_rows, rows - done)
            chunk = _stamped(make_rows(n, seed=seed + done // chunk_rows), done)
            table = chunk.select("conversation_id", "created_at", "language", "input", "output", "context").to_arrow()
            if writer is None:
                writer = _writer(partial, table.schema, tag)
            writer.write_table(table, row_group_size=chunk_rows)
            done += n
            print(f"  landing: {done:,} of {rows:,} rows", file=sys.stderr, flush=True)
    finally:
        if writer is not None:
            writer.close()
    os.replace(partial, path)  # only a complete file gets the name that is reused


def generate_repeat(source: Path, rows: int, path: Path) -> None:
    """``rows`` rows repeating the contents of ``source`` (row group by row group) under their own ids and
    timestamps: every result a warm store filled from ``source`` holds, on a day of ``rows`` answers."""
    import polars as pl
    import pyarrow.parquet as pq

    partial = path.with_suffix(".partial")
    with pq.ParquetFile(source) as src:
        groups = src.num_row_groups
        per_group = src.metadata.row_group(0).num_rows  # every group of a generated file is full but the last
        writer = _writer(partial, src.schema_arrow, _tag(SEED, per_group, src.metadata.num_rows))
        done = 0
        try:
            while done < rows:
                group = pl.from_arrow(src.read_row_group((done // per_group) % groups))
                assert isinstance(group, pl.DataFrame)
                group = group.head(rows - done)
                writer.write_table(_stamped(group, done).to_arrow().cast(src.schema_arrow))
                done += group.height
        finally:
            writer.close()
    os.replace(partial, path)


def landing_file(work: Path, rows: int, chunk_rows: int) -> Path:
    path = work / f"landing-{rows}.parquet"
    if _built_rows(path, _tag(SEED, chunk_rows)) != rows:
        started = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--generate", str(rows), str(path), "--chunk-rows",
                        str(chunk_rows)], check=True, cwd=ROOT)
        print(f"landing file of {rows:,} rows built in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return path


def repeat_landing_file(work: Path, source: Path, period: int, rows: int) -> Path:
    path = work / f"landing-{rows}-repeat{period}.parquet"
    if not path.exists():
        subprocess.run([sys.executable, __file__, "--generate-repeat", str(source), str(rows), str(path)],
                       check=True, cwd=ROOT)
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--chunk-rows", type=int, default=CHUNK_ROWS, help="rows per generated chunk and row group")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--generate", nargs=2, metavar=("ROWS", "PATH"), help="a landing file of ROWS rows")
    what.add_argument("--generate-repeat", nargs=3, metavar=("SOURCE", "ROWS", "PATH"),
                      help="ROWS rows repeating SOURCE's under their own ids and timestamps")
    args = parser.parse_args()
    if args.generate:
        generate(int(args.generate[0]), Path(args.generate[1]), args.chunk_rows, SEED)
    else:
        generate_repeat(Path(args.generate_repeat[0]), int(args.generate_repeat[1]), Path(args.generate_repeat[2]))
