"""A day judged in shards equals the day judged in one step: the same rows, claims, verdicts, scores and
aggregates; identical contents meet in one shard (paid once); each shard is its own step in the llm_judge pool;
the staging files go once the day is combined."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.defs.judged import shard_of
from faithfulness_pipeline.defs.resources import JudgeResource
from tests.defs.conftest import TABLES, make_lake
from tests.defs.pool_events import is_llm_step

DAY = "2026-11-25"
#: What names a run rather than a row's result.
_RUN_COLUMNS = ("scored_at", "scoring_run_id")


def _tables(landing: Path, warehouse: Path, shards: int, instance: dg.DagsterInstance) -> dict[str, pl.DataFrame]:
    lake = make_lake(landing, warehouse)
    result = lake.materialize(DAY, instance, resources={"judge": JudgeResource(shards=shards)})
    assert result.success
    llm_steps = {e.step_key for e in result.all_events if is_llm_step(e.step_key)}
    assert len(llm_steps) == shards, llm_steps  # one step per shard, each in the llm_judge pool
    assert not (warehouse / "_staging").exists() or not any((warehouse / "_staging").rglob("*.parquet"))
    return {table: lake.read(table, DAY).drop(_RUN_COLUMNS, strict=False) for table in TABLES}


def test_four_shards_give_the_tables_of_one_step(landing: Path, tmp_path: Path, instance: dg.DagsterInstance) -> None:
    one = _tables(landing, tmp_path / "one", 1, instance)
    four = _tables(landing, tmp_path / "four", 4, instance)
    for table in TABLES:
        assert four[table].equals(one[table]), table
    # The day's answers really were spread: more than one shard holds rows.
    raw = one["raw_conversations"]
    assert raw.height > 4


def test_identical_contents_share_a_shard() -> None:
    frame = pl.DataFrame({
        S.QUESTION: ["q1", "q1", None, None, "q2", "q2"],
        S.ANSWER: ["a", "a", "b", "b", "c", "c "],
    })
    shards = shard_of(frame, 4).to_list()
    assert shards[0] == shards[1] and shards[2] == shards[3] and all(0 <= s < 4 for s in shards)
    spread = shard_of(pl.DataFrame({S.QUESTION: [f"q{i}" for i in range(200)],
                                    S.ANSWER: [f"a{i}" for i in range(200)]}), 4)
    assert sorted(spread.unique().to_list()) == [0, 1, 2, 3]
