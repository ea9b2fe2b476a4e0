"""The Dagster landing load reads JSON Lines and CSV beside Parquet, validated like Parquet (real
``dagster.materialize`` runs on real files)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import polars as pl

from tests.defs.conftest import SAMPLE, make_lake, sample_ids
from tests.reliability.test_bad_landing_files import _failure, _materialized

DAY = "2026-11-25"


def test_json_lines_and_csv_landing_files_are_scored(
    tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    pl.read_parquet(SAMPLE / "chat" / "conversations.parquet").write_ndjson(landing / "chat.jsonl")
    pl.read_parquet(SAMPLE / "flat" / "conversations.parquet").write_ndjson(landing / "flat.jsonl")
    # JSON has no datetime: the timestamps are ISO-8601 text in every file, so the types agree. This CSV has
    # no timestamp: its rows go to its arrival day.
    extra = pl.DataFrame({"conversation_id": ["csv-zh", "csv-ko"], "output": ["埃菲尔铁塔高330米。", "에펠탑은 파리에 있다."]})
    extra.write_csv(landing / "extra.csv")
    arrival = datetime(2026, 11, 25, 12, tzinfo=UTC).timestamp()
    os.utime(landing / "extra.csv", (arrival, arrival))
    lake = make_lake(landing, tmp_path / "warehouse")
    result = lake.materialize(DAY, instance)
    assert result.success, _failure(result)
    # every check passes but the WARN that the offline baseline scored the day (no model set)
    assert {e.check_name for e in result.get_asset_check_evaluations() if not e.passed} == {"llm_judge_used"}
    scored = lake.read("scored_conversations", DAY)
    assert set(scored.get_column("conversation_id")) == sample_ids()[DAY] | {"csv-zh", "csv-ko"}
    assert scored.filter(pl.col("conversation_id") == "csv-zh").get_column("output").to_list() == ["埃菲尔铁塔高330米。"]
    assert scored.get_column("status").unique().to_list() == ["ok"]
    # the chat rows came from the JSON Lines; their messages stay in raw_conversations, not the scored table
    raw = lake.read("raw_conversations", DAY)
    assert raw.filter(pl.col("messages").is_not_null()).height > 0 and "messages" not in scored.columns


def test_an_unreadable_json_lines_landing_file_stops_the_day_naming_it(
    tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    pl.read_parquet(SAMPLE / "flat" / "conversations.parquet").write_parquet(landing / "good.parquet")
    (landing / "bad.jsonl").write_text('{"output": "a"}\nnot json\n', encoding="utf-8")
    lake = make_lake(landing, tmp_path / "warehouse")
    result = lake.materialize(DAY, instance)
    assert not result.success
    message = _failure(result)
    assert "bad.jsonl" in message and "JSON Lines" in message, message
    assert _materialized(result) == set()
