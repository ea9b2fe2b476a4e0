"""Input files the readers used to refuse with a traceback or misread silently: each is now one line naming
file, column (or line) and fix, exit 2, before any request (the LLM judge against the fake server counts
them); what is read passes through unchanged, in value and in arrow type. Real files, real subprocesses."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.cli.test_cli import run_cli

KEY = "sk-fidelity-test-key"


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(ScriptedJudge(), api_key=KEY) as srv:
        yield srv


def _llm_score(server: FakeLLMServer, src: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(src), "-o", str(out), "--quiet",
           "--model", "openai/fake-judge", "--api-base", server.base_url, "--api-key-env", "FP_FIDELITY_KEY",
           "--timeout", "5", *extra]
    env = {**os.environ, "FP_FIDELITY_KEY": KEY}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)


def _one_line_refusal(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _write_text(body: str, name: str) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        path = folder / name
        path.write_text(body, encoding="utf-8")
        return path

    return write


def _duplicate_columns(folder: Path) -> Path:
    path = folder / "dup.parquet"
    table = pa.table([pa.array(["Paris is in France."]), pa.array(["x"]), pa.array(["y"])],
                     names=["output", "note", "note"])
    pq.write_table(table, path)
    return path


REFUSED = [
    ("two columns of one name in Parquet", _duplicate_columns, ["dup.parquet", "'note'", "Rename"]),
    ("a JSON key twice", _write_text('{"output": "Paris.", "context": ["Paris."]}\n'
                                     '{"output": "Rome.", "output": "Milan."}\n', "twice.jsonl"),
     ["twice.jsonl", "line 2", "'output'", "twice"]),
    ("a JSON key twice inside an object",
     _write_text('{"output": "Paris.", "meta": {"a": 1, "a": 2}}\n', "nested.jsonl"), ["line 1", "'a'"]),
    ("context text on one line and a list on another",
     _write_text('{"output": "Paris is in France.", "context": "Paris is in France."}\n'
                 '{"output": "Rome is in Italy.", "context": ["Rome is in Italy.", "Rome is old."]}\n', "mixed.jsonl"),
     ["mixed.jsonl", "'context'", "line 1", "line 2", "a list"]),
    ("message content text and a list of parts",
     _write_text('{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": '
                 '[{"type": "text", "text": "Paris."}]}]}\n', "parts.jsonl"),
     ["parts.jsonl", "'messages[].content'", "line 1"]),
    ("an object where other lines hold text",
     _write_text('{"output": "a", "tag": "x"}\n\n{"output": "b", "tag": {"k": 1}}\n', "obj.jsonl"),
     ["'tag'", "line 3", "an object"]),
    ("a JSON integer no 64-bit type holds",
     _write_text('{"output": "Paris.", "n": 340282366920938463463374607431768211455}\n', "huge.jsonl"),
     ["huge.jsonl", "'n'", "strings"]),
    ("a negative JSON integer beyond int64",
     _write_text('{"output": "Paris.", "n": -18446744073709551615}\n', "neg.jsonl"), ["'n'", "-18446744073709551615"]),
    ("big integers inside a JSON list",
     _write_text('{"output": "Paris.", "n": [18446744073709551615]}\n', "inlist.jsonl"), ["'n'", "inside"]),
]


@pytest.mark.parametrize(("case", "write", "needles"), REFUSED, ids=[c[0] for c in REFUSED])
def test_a_file_read_wrongly_is_refused_before_any_request(server: FakeLLMServer, tmp_path: Path, case: str,
                                                          write: Callable[[Path], Path], needles: list[str]) -> None:
    src = write(tmp_path)
    result = _llm_score(server, src, tmp_path / "out.parquet")
    _one_line_refusal(result, *needles)
    assert server.stats().requests == 0
    assert not (tmp_path / "out.parquet").exists()


def test_a_dry_run_refuses_the_same_files(tmp_path: Path) -> None:
    for _, write, needles in REFUSED:
        src = write(tmp_path)
        _one_line_refusal(run_cli("score", str(src), "-o", str(tmp_path / "o.parquet"), "--dry-run"), *needles)


def test_duplicate_parquet_columns_are_refused_by_report_and_calibrate(tmp_path: Path) -> None:
    src = _duplicate_columns(tmp_path)
    _one_line_refusal(run_cli("report", str(src), "-o", str(tmp_path / "r.html")), "dup.parquet", "'note'")
    _one_line_refusal(run_cli("calibrate", "--labelled", str(src)), "dup.parquet", "'note'")


@pytest.mark.parametrize("suffix", ["jsonl", "csv"])
def test_a_uint64_hash_passes_through_as_an_unsigned_64_bit_integer(tmp_path: Path, suffix: str) -> None:
    big = 2**64 - 1
    src = tmp_path / f"in.{suffix}"
    if suffix == "jsonl":
        src.write_text(f'{{"output": "Paris.", "h": {big}}}\n{{"output": "Rome.", "h": 7}}\n', encoding="utf-8")
    else:
        src.write_text(f"output,h\nParis.,{big}\nRome.,7\n", encoding="utf-8")
    result = run_cli("score", str(src), "-o", str(tmp_path / "o.parquet"), "--quiet")
    assert result.returncode == 0, result.stderr
    scored = pq.read_table(tmp_path / "o.parquet")
    assert scored.schema.field("h").type == pa.uint64()
    assert scored.column("h").to_pylist() == [big, 7]


def test_a_csv_integer_no_64_bit_type_holds_passes_through_as_written(tmp_path: Path) -> None:
    huge = "340282366920938463463374607431768211455"
    src = tmp_path / "in.csv"
    src.write_text(f"output,n\nParis.,{huge}\nRome.,-5\n", encoding="utf-8")
    result = run_cli("score", str(src), "-o", str(tmp_path / "o.parquet"), "--quiet")
    assert result.returncode == 0, result.stderr
    assert pl.read_parquet(tmp_path / "o.parquet").get_column("n").to_list() == [huge, "-5"]


def test_csv_ids_are_text_as_written(server: FakeLLMServer, tmp_path: Path) -> None:
    src = tmp_path / "ids.csv"
    src.write_text("conversation_id,turn,output,zip\n00123,1,Paris is in France.,01234\n"
                   "0123,1,Rome is in Italy.,12345\n123,01,Oslo is in Norway.,00000\n", encoding="utf-8")
    result = _llm_score(server, src, tmp_path / "o.parquet")
    assert result.returncode == 0, result.stderr
    scored = pl.read_parquet(tmp_path / "o.parquet")
    assert scored.get_column("conversation_id").to_list() == ["00123", "0123", "123"]
    assert scored.get_column("row_key").to_list() == ["00123#1", "0123#1", "123#01"]
    # Other integer columns whose text the number would not give back stay text too.
    assert scored.get_column("zip").to_list() == ["01234", "12345", "00000"]


def test_csv_ids_of_two_files_are_text_in_both(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text("conversation_id,output\n1,Paris.\n2,Rome.\n", encoding="utf-8")
    (tmp_path / "in" / "b.csv").write_text("conversation_id,output\n001,Oslo.\n", encoding="utf-8")
    result = run_cli("score", str(tmp_path / "in"), "-o", str(tmp_path / "o.parquet"), "--quiet")
    assert result.returncode == 0, result.stderr
    assert sorted(pl.read_parquet(tmp_path / "o.parquet").get_column("row_key")) == ["001", "1", "2"]


def test_json_text_and_numbers_in_one_column_are_still_read_as_text(tmp_path: Path) -> None:
    # The scalar mix polars reads unchanged (as text) is not refused: only lists and objects lose values.
    src = tmp_path / "in.jsonl"
    src.write_text('{"conversation_id": 17, "output": "Paris."}\n{"conversation_id": "x9", "output": "Rome."}\n',
                   encoding="utf-8")
    result = run_cli("score", str(src), "-o", str(tmp_path / "o.parquet"), "--quiet")
    assert result.returncode == 0, result.stderr
    assert pl.read_parquet(tmp_path / "o.parquet").get_column("row_key").to_list() == ["17", "x9"]


def test_passthrough_columns_keep_their_arrow_types(tmp_path: Path) -> None:
    table = pa.table({
        "output": pa.array(["Paris is in France.", "Rome is in Italy."]),
        "digest": pa.array([b"0123456789abcdef", None], pa.binary(16)),
        "at": pa.array([datetime.time(1, 2, 3, 4), None], pa.time64("us")),
        "took": pa.array([3, None], pa.duration("s")),
        "nested": pa.array([{"t": datetime.time(5)}, None], pa.struct([("t", pa.time64("us"))])),
        "tag": pa.array(["a", "b"]).dictionary_encode(),
        "counts": pa.array([[("k", 1)], None], pa.map_(pa.string(), pa.int64())),
    })
    src = tmp_path / "in.parquet"
    pq.write_table(table, src)
    result = run_cli("score", str(src), "-o", str(tmp_path / "o.parquet"), "--quiet")
    assert result.returncode == 0, result.stderr
    scored = pq.read_table(tmp_path / "o.parquet")
    written = pq.read_schema(src)
    for name in ("digest", "at", "took", "nested", "tag", "counts"):
        assert scored.schema.field(name).type == written.field(name).type, name
        assert scored.column(name).to_pylist() == pq.read_table(src).column(name).to_pylist(), name


@pytest.mark.parametrize("problem", ["missing", "folder", "latin-1"])
def test_a_bad_context_file_is_one_line(tmp_path: Path, problem: str) -> None:
    src = tmp_path / "in.csv"
    src.write_text("output\nParis.\n", encoding="utf-8")
    context = tmp_path / "context.txt"
    if problem == "folder":
        context.mkdir()
    elif problem == "latin-1":
        context.write_bytes("Café".encode("latin-1"))
    line = _one_line_refusal(run_cli("score", str(src), "-o", str(tmp_path / "o.parquet"), "--context-file",
                                     str(context)), "--context-file", "context.txt")
    assert {"missing": "does not exist", "folder": "folder", "latin-1": "UTF-8"}[problem] in line


@pytest.mark.parametrize("name", ["scored.csv", "scored.jsonl", "input.parquet", "mistyped.parquet", "junk.parquet"])
def test_report_refuses_what_is_no_scored_table_in_one_line(tmp_path: Path, name: str) -> None:
    src = tmp_path / name
    if name == "scored.csv":
        src.write_text("row_key,status\na,ok\n", encoding="utf-8")
    elif name == "scored.jsonl":
        src.write_text('{"row_key": "a"}\n', encoding="utf-8")
    elif name == "input.parquet":
        pl.DataFrame({"output": ["x"]}).write_parquet(src)
    elif name == "mistyped.parquet":
        pl.DataFrame({"row_key": ["a"], "status": ["ok"], "verdicts": ["none"], "hallucination_score": [0.1],
                      "faithfulness_score": [0.9]}).write_parquet(src)
    else:
        src.write_bytes(b"PAR1 not really")
    _one_line_refusal(run_cli("report", str(src), "-o", str(tmp_path / "r.html")), name)
    assert not (tmp_path / "r.html").exists()
