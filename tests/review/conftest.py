"""The review's tables, made as a user makes them: the sample data (en, zh-CN, zh-TW, ko) and one hostile
answer scored by the offline judge on the command line, and a queue of every answer drawn with
``review sample``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest

from tests.cli.test_cli import SAMPLE, run_cli

#: An answer and a passage that would run or load something if the page put them in as markup.
HOSTILE_ANSWER = "It is 330 m tall.</script><script>window.__pwned = 1</script>"
HOSTILE_PASSAGE = "<img src=x onerror=\"window.__pwned = 2\"> The tower is 330 metres tall."


@dataclass(frozen=True)
class Reviewed:
    scored: Path
    queue: Path
    rows: pl.DataFrame  # the scored table, read back


@pytest.fixture(scope="session")
def reviewed(tmp_path_factory: pytest.TempPathFactory) -> Reviewed:
    folder = tmp_path_factory.mktemp("review")
    flat = pl.read_parquet(SAMPLE / "flat")
    evil = flat.head(1).with_columns(pl.lit("evil-1").alias("conversation_id"), pl.lit("How tall?").alias("input"),
                                     pl.lit(HOSTILE_ANSWER).alias("output"),
                                     pl.lit([HOSTILE_PASSAGE]).alias("context"))
    pl.concat([flat, evil]).write_parquet(folder / "conversations.parquet")
    done = run_cli("score", str(folder / "conversations.parquet"), "-o", str(folder / "scored.parquet"), "--quiet")
    assert done.returncode == 0, done.stderr
    done = run_cli("review", "sample", str(folder / "scored.parquet"), "--size", "100", "-o",
                   str(folder / "queue.parquet"))
    assert done.returncode == 0, done.stderr
    return Reviewed(folder / "scored.parquet", folder / "queue.parquet", pl.read_parquet(folder / "scored.parquet"))
