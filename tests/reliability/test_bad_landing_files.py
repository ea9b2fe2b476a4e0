"""Bad landing files through Dagster (the CLI's 25-case matrix is in tests/cli/test_bad_input.py; these
are the cases only the Dagster layer has): the day's load fails before any LLM step with a message that
names the file, the column and the fix; odd text in a landing file is scored without losing a row."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.defs.conftest import SAMPLE, make_lake
from tests.reliability.support import DAY

NOON = datetime(2026, 11, 25, 12, tzinfo=UTC)


def _failure(result: dg.ExecuteInProcessResult) -> str:
    messages = []
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            error = event.event_specific_data.error  # type: ignore[union-attr]
            while error is not None:
                messages.append(error.message)
                error = error.cause
    return "\n".join(messages)


def _materialized(result: dg.ExecuteInProcessResult) -> set[str]:
    return {e.asset_key.to_user_string() for e in result.get_asset_materialization_events() if e.asset_key}


def _landing_with(tmp_path: Path, bad: pl.DataFrame | bytes) -> Path:
    """A landing folder with a good sample file and ``bad.parquet`` beside it."""
    landing = tmp_path / "landing"
    landing.mkdir()
    shutil.copy(SAMPLE / "flat" / "conversations.parquet", landing / "good.parquet")
    if isinstance(bad, bytes):
        (landing / "bad.parquet").write_bytes(bad)
    else:
        bad.write_parquet(landing / "bad.parquet")
    return landing


def _invalid_utf8(column: str) -> bytes:
    """A Parquet file whose ``column`` holds bytes that are not UTF-8 in a string column (a legacy writer)."""
    texts = [b"The museum opened in 1901.", "博物馆于1901年开放。".encode(), b"caf\xe9 \xff\xfe opened."]
    bad = pa.array(texts, type=pa.binary()).view(pa.string())
    good = pa.array([t.decode("utf-8", "replace") for t in texts])
    stamp = pa.array([NOON] * 3, type=pa.timestamp("us", tz="UTC"))
    table = pa.table({"conversation_id": ["u1", "u2", "u3"], "created_at": stamp,
                      "output": bad if column == "output" else good,
                      "context": pa.array([[t] for t in texts], type=pa.list_(pa.binary())).cast(
                          pa.list_(pa.binary())).view(pa.list_(pa.string())) if column == "context"
                      else pa.array([[t] for t in good.to_pylist()])})  # fmt: skip
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


BAD_FILES: list[tuple[str, pl.DataFrame | bytes, list[str]]] = [
    ("number as answer", pl.DataFrame({"conversation_id": ["x1"], "created_at": [NOON], "output": [5]}),
     ["bad.parquet", "'output' (answer) has type Int64", "scoring resource"]),
    ("no answer column", pl.DataFrame({"conversation_id": ["x1"], "created_at": [NOON], "text": ["hi"]}),
     ["bad.parquet", "no answer column", "text (String)", "scoring resource"]),
    ("context as a struct", pl.DataFrame({"conversation_id": ["x1"], "created_at": [NOON], "output": ["A."],
                                          "context": [{"p": "x"}]}),
     ["bad.parquet", "'context' (context) has type Struct"]),
    ("timestamps that are not dates", pl.DataFrame({"conversation_id": ["x1", "x2"], "created_at": ["yesterday", "2026-11-25"],
                                                    "output": ["hi", "ho"]}),
     ["bad.parquet", "'created_at'", "not ISO-8601", "['yesterday']", "timestamp_column"]),
    ("timestamp column of a wrong type", pl.DataFrame({"conversation_id": ["x1"], "created_at": [5], "output": ["hi"]}),
     ["bad.parquet", "'created_at'", "Int64", "timestamp_column"]),
    ("corrupt Parquet", b"PAR1" + b"\0" * 64 + b"PAR1", ["bad.parquet", "cannot read", "Parquet"]),
    ("invalid UTF-8 in the answers", _invalid_utf8("output"), ["bad.parquet", "'output'", "not valid UTF-8", "row 2",
                                                              "Re-encode"]),
    ("invalid UTF-8 in the passages", _invalid_utf8("context"), ["bad.parquet", "'context'", "not valid UTF-8"]),
]


@pytest.mark.parametrize(("case", "bad", "needles"), BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_a_bad_landing_file_stops_the_day_before_any_llm_step_and_says_why(
    case: str, bad: pl.DataFrame | bytes, needles: list[str], tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    lake = make_lake(_landing_with(tmp_path, bad), tmp_path / "warehouse")
    result = lake.materialize(DAY, instance)
    assert not result.success
    message = _failure(result)
    for needle in needles:
        assert needle in message, (case, message)
    assert _materialized(result) == set()  # nothing stored, no judge step ran
    assert not (tmp_path / "warehouse" / "extracted_claims").exists()


def test_one_landing_file_per_day_loads_each_day(tmp_path: Path, instance: dg.DagsterInstance) -> None:
    """The usual delivery: a file per day. The earlier day's file has no rows for the later day, and a
    file delivered empty has no rows at all: neither changes the day's table."""
    landing = tmp_path / "landing"
    landing.mkdir()
    sample = pl.read_parquet(SAMPLE / "flat" / "conversations.parquet")
    days = sample.get_column("created_at").dt.date().cast(pl.String)
    for day in sorted(set(days.to_list())):
        sample.filter(days == day).write_parquet(landing / f"{day}.parquet")
    sample.head(0).write_parquet(landing / "0-empty.parquet")
    lake = make_lake(landing, tmp_path / "warehouse")
    result = lake.materialize(DAY, instance)
    assert result.success, _failure(result)
    # every rule holds; only the WARN that the offline baseline scored the day (no model set) is raised
    assert [e.check_name for e in result.get_asset_check_evaluations() if not e.passed] == ["llm_judge_used"]
    assert lake.read("scored_conversations", DAY).height == sample.filter(days == DAY).height


ODD = [
    "Café\u0301 opens 🙂 at nine\u200b.\x07 Bye\u200d!",
    "مرحبا. يبلغ ارتفاع البرج ثلاثمائة متر.",
    "東京タワーの高さは333メートルです。\u202eevil\u202c",
    "\u0000null byte inside. Fine?",
    "第一句。第二句！第三句？",
    "첫 문장이다. 둘째 문장이다.",
    "",
    "   ",
]


def test_odd_text_in_a_landing_file_is_scored_without_losing_a_row(tmp_path: Path, instance: dg.DagsterInstance) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    n = len(ODD)
    pl.DataFrame({
        "conversation_id": [f"odd-{i}" for i in range(n)],
        "created_at": [NOON] * n,
        "output": ODD,
        "context": [[text, "\u200f"] for text in ODD],
    }).write_parquet(landing / "odd.parquet")
    lake = make_lake(landing, tmp_path / "warehouse")
    result = lake.materialize(DAY, instance)
    assert result.success, _failure(result)
    # every rule holds; only the WARN that the offline baseline scored the day (no model set) is raised
    assert [e.check_name for e in result.get_asset_check_evaluations() if not e.passed] == ["llm_judge_used"]
    scored = lake.read("scored_conversations", DAY).sort("row_key")
    assert scored.get_column("row_key").to_list() == [f"odd-{i}" for i in range(n)]
    assert scored.get_column("output").to_list() == ODD  # passthrough exactly as delivered
    assert scored.get_column("status").unique().to_list() == ["ok"]


def test_rows_dated_before_the_first_partition_are_reported_not_silently_skipped(
    tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    """Rows before FP_PARTITIONS_START belong to no partition: the raw load's check warns with their count
    and files, its metadata counts them, and the day's own rows are still scored."""
    landing = tmp_path / "landing"
    landing.mkdir()
    shutil.copy(SAMPLE / "flat" / "conversations.parquet", landing / "good.parquet")
    old = datetime(2025, 1, 3, 9, tzinfo=UTC)
    pl.DataFrame({
        "conversation_id": ["old-1", "old-2", "old-3"],
        "created_at": [old, old, NOON],
        "output": ["The bridge opened in 1901.", "大桥于1901年开放。", "다리는 1901년에 열었다."],
    }).write_parquet(landing / "archive.parquet")
    lake = make_lake(landing, tmp_path / "warehouse")
    result = lake.materialize(DAY, instance)
    assert result.success, _failure(result)
    check = next(e for e in result.get_asset_check_evaluations() if e.check_name == "rows_before_partitions_start")
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert check.metadata["rows_before_partitions_start"].value == 2
    assert "archive.parquet" in str(check.metadata["files"].value) and "good.parquet" not in str(check.metadata["files"].value)
    assert check.description is not None and "FP_PARTITIONS_START" in check.description
    raw = next(e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "raw_conversations")
    assert raw.materialization.metadata["rows_before_partitions_start"].value == 2
    assert "old-3" in lake.read("scored_conversations", DAY).get_column("row_key").to_list()  # the day's row is scored


def test_no_warning_when_every_row_is_inside_the_partitions(tmp_path: Path, instance: dg.DagsterInstance) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    shutil.copy(SAMPLE / "flat" / "conversations.parquet", landing / "good.parquet")
    result = make_lake(landing, tmp_path / "warehouse").materialize(DAY, instance)
    check = next(e for e in result.get_asset_check_evaluations() if e.check_name == "rows_before_partitions_start")
    assert check.passed and check.metadata["rows_before_partitions_start"].value == 0
