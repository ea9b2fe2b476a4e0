"""Size of the HTML answer-quality report (and how long it takes to write) for the sample and 100,000 rows.

The sample: both sample files scored with the offline judge (26 answers over 3 days, 2 models), reported
like ``faithfulness-pipeline report``. 100,000 rows: typical RAG rows (``bench/rag_rows.py``, en/zh/ko)
scored once with the offline judge, ``--distinct`` of them, then repeated under new keys over 30 days and
3 models: the report reduces rows to per day x model figures and bins before drawing, so only the worst
answers (20, texts cut at 1,200 characters) carry text, and the file's size follows days x models, not rows.

    .venv/bin/python bench/report_size.py [--rows 100000] [--distinct 2000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl
from common import machine, machine_line, sample_rows
from rag_rows import make_rows

from faithfulness_pipeline import score_frame
from faithfulness_pipeline.report import build_report

OFFLINE = frozenset({"offline-lexical-v1"})
MAIL_LIMIT_BYTES = 1_000_000  # an attachment every mail system takes


def _sample() -> pl.DataFrame:
    rows = sample_rows()
    days = [dt.datetime(2026, 11, 24 + i % 3, 9, tzinfo=dt.UTC) for i in range(rows.height)]
    models = ["gpt-4o-mini" if i % 2 else "claude-3-5-haiku" for i in range(rows.height)]
    return score_frame(rows.with_columns(pl.Series("created_at", days), pl.Series("model", models)))


def _large(rows: int, distinct: int) -> pl.DataFrame:
    scored = score_frame(make_rows(distinct, seed=11))
    repeats = -(-rows // distinct)
    frame = pl.concat([scored] * repeats).head(rows)
    index = pl.int_range(pl.len())
    start = dt.datetime(2026, 11, 1, 12, tzinfo=dt.UTC)
    return frame.with_columns(
        (pl.lit("c-") + index.cast(pl.String)).alias("conversation_id"),
        (pl.lit("c-") + index.cast(pl.String)).alias("row_key"),
        (pl.lit(start) + pl.duration(days=index % 30)).alias("created_at"),
        pl.format("model-{}", index // 30 % 3).alias("model"),  # every day has every model
    )


def _measure(name: str, scored: pl.DataFrame, folder: Path) -> dict[str, Any]:
    table = folder / f"{name}.parquet"
    scored.write_parquet(table)
    started = time.perf_counter()
    path, data = build_report(str(table), folder / f"{name}.html", baseline_judges=OFFLINE)
    seconds = time.perf_counter() - started
    raw = path.read_bytes()
    return {"name": name, "rows": scored.height, "groups": data.daily.height, "worst": len(data.worst),
            "bytes": len(raw), "gzip_bytes": len(gzip.compress(raw, 9)), "seconds": seconds,
            "svg_bytes": sum(len(part.split("</svg>", 1)[0]) for part in raw.decode().split("<svg ")[1:])}


def run(rows: int, distinct: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        results = [_measure("sample", _sample(), folder), _measure(f"{rows:,} rows", _large(rows, distinct), folder)]
    return {"results": results, "machine": machine(), "load_average": os.getloadavg()[0]}


def report(result: dict[str, Any]) -> str:
    lines = [
        "# HTML report: file size",
        "",
        "`.venv/bin/python bench/report_size.py` — the answer-quality report (`faithfulness-pipeline report`) of "
        "the sample data (scored by the offline judge) and of 100,000 typical RAG rows over 30 days x 3 models. "
        "The page is self-contained (inline CSS and SVG, no script, no font); its size follows days x models "
        "and the 20 worst answers, not the row count.",
        "",
        "| table | rows | day x model rows | worst answers | HTML | of which SVG charts | gzip -9 | written in | "
        "mailable (< 1 MB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in result["results"]:
        ok = "yes" if r["bytes"] < MAIL_LIMIT_BYTES else "NOT met"
        lines.append(
            f"| {r['name']} | {r['rows']:,} | {r['groups']} | {r['worst']} | {r['bytes'] / 1024:.0f} KiB | "
            f"{r['svg_bytes'] / 1024:.0f} KiB | {r['gzip_bytes'] / 1024:.0f} KiB | {r['seconds']:.1f} s | {ok} |"
        )
    lines += ["", machine_line(result)]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--distinct", type=int, default=2_000)
    args = parser.parse_args()
    print(report(run(args.rows, args.distinct)))
