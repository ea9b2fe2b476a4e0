"""What the page shows of an answer is what the judge was given: the chat sample's passages are its context cell,
else the tool results before the answer, found the same from a command line's scored table (which keeps the messages) and from a
warehouse's (which leaves them to raw_conversations, joined by row key); an answer of the queue in no scored
table, or in two, is refused in one line."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline import score_frame
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.core.messages import assistant_turn_indexes, tool_results_before
from faithfulness_pipeline.review.items import read_items
from faithfulness_pipeline.settings.scoring import ScoringSettings
from tests.cli.test_cli import SAMPLE


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pl.DataFrame]:
    folder = tmp_path_factory.mktemp("items")
    scored = score_frame(pl.read_parquet(SAMPLE / "chat"))
    scored.write_parquet(folder / "scored.parquet")
    return folder, scored


def _queue(keys: list[str]) -> pl.DataFrame:
    return pl.DataFrame({"row_key": keys, "inclusion_probability": [0.5] * len(keys)})


def test_a_chats_passages_are_its_tool_results_from_either_table(chat: tuple[Path, pl.DataFrame]) -> None:
    folder, scored = chat
    keys = scored.get_column("row_key").to_list()
    expected = {}
    for row in scored.iter_rows(named=True):
        messages = row["messages"] or []
        turns = assistant_turn_indexes(messages)  # a chat without an answer: every tool result it holds
        # as the scorer reads a chat: its context cell where that holds passages, else its tool results
        expected[row["row_key"]] = row["context"] or tool_results_before(messages, turns[-1] if turns else len(messages))
    assert any(not row["context"] and expected[row["row_key"]] for row in scored.iter_rows(named=True))

    whole = read_items(_queue(keys), [str(folder / "scored.parquet")], [], ScoringSettings())
    assert [item.row_key for item in whole] == keys
    for item, row in zip(whole, scored.iter_rows(named=True), strict=True):
        assert list(item.context) == expected[item.row_key]
        assert (item.question, item.answer) == (row["input"], row["output"])
        assert item.inclusion_probability == 0.5 and item.judge_model == "offline-lexical-v1"
        assert "hallucination_score" not in item.shown() and item.judged["verdicts"] is not None

    # a warehouse's scored table without the messages and passages; raw_conversations holds them
    scored.drop("messages", "context").write_parquet(folder / "scored_wh.parquet")
    scored.select("row_key", "messages", "context").write_parquet(folder / "raw.parquet")
    joined = read_items(_queue(keys), [str(folder / "scored_wh.parquet")], [str(folder / "raw.parquet")],
                        ScoringSettings())
    assert [(i.question, i.answer, i.context, i.content_hash) for i in joined] == [
        (i.question, i.answer, i.context, i.content_hash) for i in whole]
    alone = read_items(_queue(keys), [str(folder / "scored_wh.parquet")], [], ScoringSettings())
    assert all(item.context == () for item in alone)  # without --raw the passages are not there to show


def test_an_answer_in_no_scored_table_or_in_two_is_refused(chat: tuple[Path, pl.DataFrame]) -> None:
    folder, scored = chat
    path = str(folder / "scored.parquet")
    with pytest.raises(InputError, match=r"1 answer\(s\) of the queue are in none of the scored tables.*gone-1"):
        read_items(_queue(["gone-1", scored.get_column("row_key")[0]]), [path], [], ScoringSettings())
    with pytest.raises(InputError, match="in the scored tables twice"):
        read_items(_queue(scored.get_column("row_key").to_list()), [path, path], [], ScoringSettings())
