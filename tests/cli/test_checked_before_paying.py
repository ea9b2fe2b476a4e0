"""What the input rows alone can refuse is refused before the first request of a paid run, wherever in the
inputs it is: a run used to pay for the first chunks, then stop at a duplicate key in the second file. Real
files, the CLI as a subprocess, real HTTP to the fake server, which counts the requests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import typical_frame
from tests.cli.test_input_fidelity import _llm_score, _one_line_refusal, server

__all__ = ["server"]  # the fixture, shared with the fidelity tests


def _first(folder: Path) -> None:
    typical_frame(60, seed=3, ids="a{:04d}").write_parquet(folder / "1-first.parquet")


def _duplicate_in_second(folder: Path) -> None:
    second = typical_frame(40, seed=4, ids="b{:04d}")
    second = second.with_columns(pl.when(pl.int_range(pl.len()) == 39).then(pl.lit("b0001"))
                                 .otherwise(pl.col("conversation_id")).alias("conversation_id"))
    second.write_parquet(folder / "2-second.parquet")


def _repeats_the_first(folder: Path) -> None:
    typical_frame(60, seed=3, ids="a{:04d}").tail(1).write_parquet(folder / "2-second.parquet")


def _null_key_in_second(folder: Path) -> None:
    second = typical_frame(40, seed=4, ids="b{:04d}")
    second.with_columns(pl.when(pl.int_range(pl.len()) == 30).then(None).otherwise(pl.col("conversation_id"))
                        .alias("conversation_id")).write_parquet(folder / "2-second.parquet")


def _bad_utf8_in_second(folder: Path) -> None:
    table = typical_frame(40, seed=4, ids="b{:04d}").to_arrow()
    at = table.column_names.index("output")
    answers = table.column(at).cast(pa.large_binary()).to_pylist()
    answers[35] = b"caf\xe9 au lait"
    pq.write_table(table.set_column(at, pa.field("output", pa.large_string()),
                                    pa.array(answers, pa.large_binary()).view(pa.large_string())),
                   folder / "2-second.parquet")


CASES = [
    ("a duplicate id within the second file", _duplicate_in_second, ["duplicate row key", "b0001"]),
    ("the second file repeats an id of the first", _repeats_the_first, ["duplicate row key", "a0059"]),
    ("a null id in the second file", _null_key_in_second, ["null in 1 row"]),
    ("text that is not UTF-8 in the second file", _bad_utf8_in_second, ["2-second.parquet", "'output'", "UTF-8"]),
]


@pytest.mark.parametrize(("case", "write", "needles"), CASES, ids=[c[0] for c in CASES])
def test_a_problem_in_the_second_file_costs_no_request(server: FakeLLMServer, tmp_path: Path, case: str,
                                                       write: Callable[[Path], None], needles: list[str]) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    _first(folder)
    write(folder)
    # Small chunks: without the check the first file's chunks would be paid before the second is read.
    result = _llm_score(server, folder, tmp_path / "out.parquet", "--chunk-rows", "20")
    _one_line_refusal(result, *needles)
    assert server.stats().requests == 0
    assert not (tmp_path / "out.parquet").exists()


def test_files_without_a_problem_are_scored_whole_after_the_check(server: FakeLLMServer, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    _first(folder)
    typical_frame(40, seed=4, ids="b{:04d}").write_parquet(folder / "2-second.parquet")
    result = _llm_score(server, folder, tmp_path / "out.parquet", "--chunk-rows", "20")
    assert result.returncode == 0, result.stderr
    scored = pl.read_parquet(tmp_path / "out.parquet")
    assert scored.height == 100 and scored.get_column("row_key").n_unique() == 100
    assert server.stats().requests > 0
