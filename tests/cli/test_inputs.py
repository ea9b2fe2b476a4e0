"""What the CLI reads: a folder of flat and chat files (each normalised on its own, like the Dagster load),
JSON Lines and CSV with the same validation and messages as Parquet. Real files, real subprocess runs."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.core.schema import SCORED_COLUMNS
from tests.cli.test_cli import SAMPLE, run_cli

SCORES = ["row_key", "n_claims", "hallucination_score", "faithfulness_score", "hallucination_reason", "status"]


def _score(src: Path, out: Path, *extra: str) -> pl.DataFrame:
    result = run_cli("score", str(src), "-o", str(out), "--quiet", *extra)
    assert result.returncode == 0, result.stderr
    return pl.read_parquet(out)


def test_the_sample_folder_of_flat_and_chat_files_scores_like_each_file_alone(tmp_path: Path) -> None:
    together = _score(SAMPLE, tmp_path / "all.parquet")
    flat = _score(SAMPLE / "flat", tmp_path / "flat.parquet")
    chat = _score(SAMPLE / "chat", tmp_path / "chat.parquet")
    assert together.height == flat.height + chat.height
    alone = pl.concat([chat.select(SCORES), flat.select(SCORES)]).sort("row_key")
    assert together.select(SCORES).sort("row_key").equals(alone)
    # Every file's columns pass through (chat files have no context column, flat ones no messages) and the
    # scored columns come last, in their documented order and types.
    assert set(flat.columns) | set(chat.columns) == set(together.columns)
    assert together.columns[-len(SCORED_COLUMNS):] == list(SCORED_COLUMNS)
    assert together.filter(pl.col("messages").is_null()).height == flat.height


def _flat_sample() -> pl.DataFrame:
    return pl.read_parquet(SAMPLE / "flat" / "conversations.parquet")


def test_json_lines_score_like_parquet_flat_and_chat(tmp_path: Path) -> None:
    for shape in ("flat", "chat"):
        frame = pl.read_parquet(SAMPLE / shape / "conversations.parquet")
        frame.write_ndjson(tmp_path / f"{shape}.jsonl")
        from_json = _score(tmp_path / f"{shape}.jsonl", tmp_path / f"{shape}-jsonl.parquet")
        from_parquet = _score(SAMPLE / shape, tmp_path / f"{shape}-parquet.parquet")
        assert from_json.select(SCORES).equals(from_parquet.select(SCORES)), shape
        assert from_json.get_column("output").to_list() == from_parquet.get_column("output").to_list()


def test_csv_scores_like_parquet_with_text_context(tmp_path: Path) -> None:
    # CSV cells are text: a context cell is one passage, as a text context column is in Parquet.
    frame = _flat_sample().with_columns(pl.col("context").list.join("\n"))
    frame.write_csv(tmp_path / "in.csv")
    frame.write_parquet(tmp_path / "in.parquet")
    from_csv = _score(tmp_path / "in.csv", tmp_path / "csv.parquet")
    from_parquet = _score(tmp_path / "in.parquet", tmp_path / "parquet.parquet")
    assert from_csv.select(SCORES).equals(from_parquet.select(SCORES))
    assert set(from_csv.get_column("language")) >= {"zh-CN", "zh-TW", "ko"}  # Chinese and Korean rows came through intact
    assert from_csv.get_column("output").to_list() == from_parquet.get_column("output").to_list()


def test_a_folder_mixing_parquet_json_lines_and_csv(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    chat = pl.read_parquet(SAMPLE / "chat" / "conversations.parquet")
    chat.write_ndjson(tmp_path / "in" / "chat.jsonl")  # JSON has no datetime: created_at is ISO-8601 text
    flat = _flat_sample().with_columns(pl.col("created_at").dt.to_string())
    flat.head(6).write_parquet(tmp_path / "in" / "a.parquet")
    # A column has one type across files (as in the Dagster load): CSV cells are text, so this file leaves
    # out the list context of the others.
    flat.slice(6).drop("context").write_csv(tmp_path / "in" / "b.csv")
    (tmp_path / "in" / "notes.txt").write_text("not an input", encoding="utf-8")
    scored = _score(tmp_path / "in", tmp_path / "o.parquet")
    assert scored.height == flat.height + chat.height
    assert sorted(scored.get_column("conversation_id")) == sorted([*flat["conversation_id"], *chat["conversation_id"]])
    assert scored.get_column("status").unique().to_list() == ["ok"]
    assert set(scored.get_column("language")) >= {"zh-CN", "ko"}
    from_csv = scored.filter(pl.col("context").is_null() & pl.col("messages").is_null())
    assert from_csv.height == flat.height - 6


BAD = [
    ("number as answer", pl.DataFrame({"conversation_id": ["x1"], "output": [5]})),
    ("no answer column", pl.DataFrame({"conversation_id": ["x1"], "text": ["hi"]})),
    ("duplicate ids", pl.DataFrame({"conversation_id": ["x1", "x1"], "output": ["a", "b"]})),
    ("null id", pl.DataFrame({"conversation_id": ["x1", None], "output": ["a", "b"]})),
]


@pytest.mark.parametrize(("case", "frame"), BAD, ids=[c for c, _ in BAD])
def test_json_lines_and_csv_get_the_same_error_as_parquet(case: str, frame: pl.DataFrame, tmp_path: Path) -> None:
    errors = {}
    for suffix, write in ((".parquet", frame.write_parquet), (".jsonl", frame.write_ndjson), (".csv", frame.write_csv)):
        src = tmp_path / f"bad{suffix}"
        write(src)
        result = run_cli("score", str(src), "-o", str(tmp_path / "o.parquet"))
        assert result.returncode == 2 and "Traceback" not in result.stderr, (case, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        errors[suffix] = result.stderr.replace(str(src), "FILE")
    assert errors[".jsonl"] == errors[".parquet"] and errors[".csv"] == errors[".parquet"], errors
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize(("name", "content", "fmt"), [
    ("bad.jsonl", b'{"output": "a"}\nnot json\n', "JSON Lines"),
    ("empty.jsonl", b"", "JSON Lines"),
    ("bad.csv", b'output,context\n"unclosed,x\n', "CSV"),
    ("bad.parquet", b"PAR1 not really parquet", "Parquet"),
])
def test_an_unreadable_file_is_one_line_naming_file_and_format(
    name: str, content: bytes, fmt: str, tmp_path: Path
) -> None:
    (tmp_path / name).write_bytes(content)
    result = run_cli("score", str(tmp_path / name), "-o", str(tmp_path / "o.parquet"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and name in line and fmt in line, line
    assert ".." not in line.replace(str(tmp_path), "")  # no doubled period after the reader's own sentence


def test_a_column_with_two_types_across_files_is_refused_like_the_dagster_check(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    _flat_sample().write_parquet(tmp_path / "in" / "a.parquet")
    _flat_sample().drop("context").write_csv(tmp_path / "in" / "b.csv")  # created_at: text here, datetime there
    result = run_cli("score", str(tmp_path / "in"), "-o", str(tmp_path / "o.parquet"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "column 'created_at'" in result.stderr and "a.parquet" in result.stderr and "b.csv" in result.stderr
    assert not (tmp_path / "o.parquet").exists()
