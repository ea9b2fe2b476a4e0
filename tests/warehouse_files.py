"""A small warehouse (the golden offline-scored rows, three days of each BI table) laid out on disk as the
Dagster assets lay it out, for the object-store tests of the views and the report."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import polars as pl

from faithfulness_pipeline.core.aggregates import daily_aggregates
from faithfulness_pipeline.core.outputs import claim_table
from faithfulness_pipeline.outputs.comparison import day_comparison
from faithfulness_pipeline.outputs.corrected import CORRECTED_TABLE
from faithfulness_pipeline.outputs.kinds import DAY, OutputContext
from faithfulness_pipeline.tables.storage import Place

GOLDEN = Path(__file__).resolve().parent / "golden" / "offline_sample" / "scored.parquet"
DAYS = ("2026-11-24", "2026-11-25", "2026-11-26")


def write_warehouse(root: Path) -> list[Path]:
    """``<root>/<table>/ds=<day>/data.parquet`` for scored_conversations, claim_table, daily_answer_quality,
    daily_model_comparison and daily_corrected_quality (no labels: the judge's figures alone); returns the files
    written."""
    scored = pl.read_parquet(GOLDEN).with_columns(pl.col("created_at").dt.date().alias("day"))
    written = []
    for day in DAYS:
        rows = scored.filter(pl.col("day") == pl.lit(day).str.to_date())
        tables = {
            "scored_conversations": rows.drop("day"),
            "claim_table": claim_table(rows, {"day": pl.col("day"), "model": pl.col("model"),
                                              "conversation_id": pl.col("conversation_id")}),
            "daily_answer_quality": daily_aggregates(rows),
            "daily_model_comparison": day_comparison(rows.drop("day"), date.fromisoformat(day), "model", 0.5),
            "daily_corrected_quality": CORRECTED_TABLE.build(rows.rename({"day": DAY}), OutputContext()),
        }
        for table, frame in tables.items():
            path = root / table / f"ds={day}" / "data.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            frame.write_parquet(path)
            written.append(path)
    return written


def upload(local_root: Path, files: list[Path], remote_root: str) -> None:
    """The same files below the URI ``remote_root``."""
    base = Place.of(remote_root)
    for path in files:
        base.child(path.relative_to(local_root).as_posix()).put_file(path)
