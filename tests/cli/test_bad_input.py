"""The bad-input matrix: every case gets a clear error naming the problem and the fix, or a documented
handling; none crashes with a traceback; none drops a row. Runs the CLI in-process (click's runner)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from faithfulness_pipeline.cli import main

MSG = pl.Struct({"role": pl.String, "content": pl.String})


def _run(tmp_path: Path, frame: pl.DataFrame | None, *extra: str, write: Callable[[Path], None] | None = None
         ) -> tuple[int, str, pl.DataFrame | None]:
    src = tmp_path / "in.parquet"
    if write is not None:
        write(src)
    elif frame is not None:
        frame.write_parquet(src)
    out = tmp_path / "out.parquet"
    result = CliRunner().invoke(main, ["score", str(src), "-o", str(out), "--quiet", *extra])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    return result.exit_code, result.output, pl.read_parquet(out) if out.exists() else None


ERRORS: list[tuple[str, pl.DataFrame, tuple[str, ...], list[str]]] = [
    ("missing answer column", pl.DataFrame({"text": ["a"]}), (), ["no answer column", "text (String)", "--output-col"]),
    ("misnamed answer column", pl.DataFrame({"output": ["a"]}), ("--output-col", "answer"),
     ["'answer'", "output (String)"]),
    ("number as answer", pl.DataFrame({"output": [1, 2]}), (), ["'output' (answer) has type Int64", "string"]),
    ("context as a number", pl.DataFrame({"output": ["a"], "context": [3.5]}), (),
     ["'context' (context) has type Float64", "list of strings"]),
    ("struct where a list is expected", pl.DataFrame({"output": ["a"], "context": [{"p": "x"}]}), (),
     ["'context' (context) has type Struct"]),
    ("messages as plain text", pl.DataFrame({"messages": ["hi"]}), (), ["'messages' (messages) has type String",
                                                                        "OpenAI chat format"]),
    ("duplicate keys", pl.DataFrame({"conversation_id": ["a", "a"], "output": ["x", "y"]}), (),
     ["duplicate row key", "['a']", "--key-col"]),
    ("missing key column", pl.DataFrame({"output": ["x"]}), ("--key-col", "id"), ["key column 'id'", "not found"]),
    ("null key", pl.DataFrame({"conversation_id": [None, "b"], "output": ["x", "y"]},
                              schema={"conversation_id": pl.String, "output": pl.String}), (), ["null in 1 row"]),
    ("reserved column name", pl.DataFrame({"output": ["x"], "hallucination_score": [0.1]}), (),
     ["hallucination_score", "Rename or drop"]),
    # key columns of a type that has no stable text: named with their type, never a polars cast error
    ("conversation_id holding lists", pl.DataFrame({"conversation_id": [[1], [2]], "output": ["x", "y"]}), (),
     ["'conversation_id' (conversation id", "List(Int64)", "--id-col"]),
    ("turn holding lists", pl.DataFrame({"conversation_id": ["a", "a"], "turn": [["1"], ["2"]], "output": ["x", "y"]}),
     (), ["'turn' (turn", "List(String)", "--turn-col"]),
    ("conversation_id holding structs", pl.DataFrame({"conversation_id": [{"a": 1}], "output": ["x"]}), (),
     ["'conversation_id'", "Struct", "--id-col"]),
    ("chat rows keyed by lists", pl.DataFrame({"conversation_id": [["c"]], "messages": [[{"role": "assistant",
     "content": "你好。"}]]}), (), ["'conversation_id'", "List(String)"]),
    ("--key-col on a binary column", pl.DataFrame({"k": [b"\xff\xfe", b"ok"], "output": ["x", "y"]}), ("--key-col", "k"),
     ["'k' (key column", "Binary", "--key-col"]),
    ("--key-col on a list column", pl.DataFrame({"k": [["a"], ["b"]], "output": ["x", "y"]}), ("--key-col", "k"),
     ["'k' (key column", "List(String)"]),
]


@pytest.mark.parametrize(("case", "frame", "args", "needles"), ERRORS, ids=[e[0] for e in ERRORS])
def test_bad_input_is_a_clear_error_and_writes_nothing(tmp_path: Path, case: str, frame: pl.DataFrame,
                                                       args: tuple[str, ...], needles: list[str]) -> None:
    code, output, scored = _run(tmp_path, frame, *args)
    assert code == 2, output
    assert output.startswith("error: ")
    for needle in needles:
        assert needle in output, (case, output)
    assert scored is None


CHAT_SCHEMA = pl.List(MSG)


def _chat(messages: list[Any] | None, schema: pl.DataType = CHAT_SCHEMA) -> pl.DataFrame:
    return pl.DataFrame({"conversation_id": ["c"], "messages": [messages]}, schema={"conversation_id": pl.String,
                                                                                   "messages": schema})


HANDLED: list[tuple[str, pl.DataFrame, dict[str, Any]]] = [
    ("null answer", pl.DataFrame({"output": [None, "A."]}, schema={"output": pl.String}), {"n_claims": 0}),
    ("empty answer", pl.DataFrame({"output": ["", "  \n"]}), {"n_claims": 0, "hallucination_score": 0.0}),
    ("null context", pl.DataFrame({"output": ["Paris is big."], "context": [None]},
                                  schema={"output": pl.String, "context": pl.List(pl.String)}),
     {"hallucination_score": 1.0, "faithfulness_score": 0.0}),
    ("empty message list", _chat([]), {"n_claims": 0}),
    ("null messages", _chat(None), {"n_claims": 0}),
    ("messages without roles", _chat([{"role": None, "content": "x"}, {"role": "assistant", "content": "A b."}]),
     {"output": "A b."}),
    ("unknown roles", _chat([{"role": "robot", "content": "x"}, {"role": "assistant", "content": "Yes."}]),
     {"output": "Yes."}),
    ("content as a list of parts", _chat(
        [{"role": "assistant", "content": [{"type": "text", "text": "Part one."}]}],
        pl.List(pl.Struct({"role": pl.String, "content": pl.List(pl.Struct({"type": pl.String, "text": pl.String}))}))),
     {"output": "Part one."}),
    ("tool call without result", _chat(
        [{"role": "assistant", "content": None, "tool_calls": [{"id": "t", "function": {"name": "f"}}]},
         {"role": "assistant", "content": "The tool said 5."}],
        pl.List(pl.Struct({"role": pl.String, "content": pl.String, "tool_calls": pl.List(pl.Struct(
            {"id": pl.String, "function": pl.Struct({"name": pl.String})}))}))),
     {"hallucination_score": 1.0}),
    ("emoji, combining marks, RTL, zero-width and control characters",
     pl.DataFrame({"output": ["Café\u0301 opens 🙂 at nine\u200b.\x07 مرحبا."],
                   "context": [["Café\u0301 opens 🙂 at nine."]]}), {"status": "ok"}),
    ("Japanese answer", pl.DataFrame({"output": ["東京タワーの高さは333メートルです。"],
                                       "context": [["東京タワーの高さは333メートルです。"]]}), {"status": "ok"}),
    ("Arabic answer", pl.DataFrame({"output": ["يبلغ ارتفاع البرج ثلاثمائة متر."],
                                     "context": [["يبلغ ارتفاع البرج ثلاثمائة متر."]]}), {"status": "ok"}),
    ("200k-character answer", pl.DataFrame({"output": ["The tower is tall. " * 10_500],
                                             "context": [["The tower is tall."]]}), {"status": "ok"}),
    ("2M-character context", pl.DataFrame({"output": ["The tower is tall."],
                                            "context": [["filler words here. " * 105_000 + "The tower is tall."]]}),
     {"status": "ok"}),
]


@pytest.mark.parametrize(("case", "frame", "expected"), HANDLED, ids=[h[0] for h in HANDLED])
def test_odd_input_is_scored_without_losing_rows(tmp_path: Path, case: str, frame: pl.DataFrame,
                                                 expected: dict[str, Any]) -> None:
    code, output, scored = _run(tmp_path, frame)
    assert code == 0, output
    assert scored is not None and scored.height == frame.height
    row = scored.row(0, named=True)
    for key, value in expected.items():
        assert row[key] == value, (case, key, row[key])


def test_empty_file_gives_empty_table(tmp_path: Path) -> None:
    code, output, scored = _run(tmp_path, pl.DataFrame(schema={"output": pl.String}))
    assert code == 0, output
    assert scored is not None and scored.height == 0 and "hallucination_score" in scored.columns


def test_corrupt_file(tmp_path: Path) -> None:
    code, output, scored = _run(tmp_path, None, write=lambda p: p.write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1"))
    assert code == 2 and "cannot read" in output and scored is None


def test_directory_whose_files_disagree(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    pl.DataFrame({"output": ["a"], "context": [["x"]]}).write_parquet(tmp_path / "d" / "1.parquet")
    pl.DataFrame({"output": ["a"], "context": ["x"]}).write_parquet(tmp_path / "d" / "2.parquet")
    result = CliRunner().invoke(main, ["score", str(tmp_path / "d"), "-o", str(tmp_path / "o.parquet")])
    assert result.exit_code == 2 and "disagree on column 'context'" in result.output
    assert "1.parquet" in result.output and "2.parquet" in result.output
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize("column", ["output", "context", "messages"])
def test_text_that_is_not_utf8_is_one_line_naming_file_column_and_row(tmp_path: Path, column: str) -> None:
    """A legacy writer's bytes in a string column: never a polars panic; file, column, row and the fix."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [b"The museum opened in 1901.", "박물관은 1901년에 문을 열었다.".encode(), b"caf\xe9 opened \xff."]
    bad = pa.array(texts, type=pa.binary()).view(pa.string())
    columns: dict[str, pa.Array] = {"conversation_id": pa.array(["a", "b", "c"])}
    if column == "messages":
        role = pa.array(["assistant"] * 3)
        columns["messages"] = pa.array([[m] for m in pa.StructArray.from_arrays([role, bad], ["role", "content"])])
    else:
        columns["output"] = bad if column == "output" else pa.array([t.decode("utf-8", "replace") for t in texts])
        if column == "context":
            offsets = pa.array([0, 1, 2, 3], type=pa.int32())
            columns["context"] = pa.ListArray.from_arrays(offsets, bad)

    code, output, scored = _run(tmp_path, None, write=lambda path: pq.write_table(pa.table(columns), path))
    assert code == 2, output
    assert output.count("\n") == 1 and output.startswith("error: ")
    assert f"column {column!r}" in output and "in.parquet" in output and "not valid UTF-8" in output
    assert "Re-encode" in output
    if column != "messages":  # nested in a struct the row is not located, the column is
        assert "row 2" in output or column == "context"
    assert scored is None
