"""Claim table, Mastra export, input resolution and atomic writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline import InputError, score_frame
from faithfulness_pipeline.core.outputs import claim_table, mastra_records
from faithfulness_pipeline.tables.inputs import resolve_inputs
from faithfulness_pipeline.tables.read import file_schema, iter_chunks
from faithfulness_pipeline.tables.write import ParquetChunkWriter, atomic_path
from faithfulness_pipeline.testing.marker_judge import MarkerJudge


def _scored() -> pl.DataFrame:
    df = pl.DataFrame({
        "conversation_id": ["ok", "bad", "empty"],
        "output": ["Fine. Wrong [C]. Maybe [H].", "Lost.", ""],
        "context": [["p0"], ["p0"], ["p0"]],
    })
    return score_frame(df, MarkerJudge(fail_verdicts={"bad"}))


def test_claim_table_has_one_row_per_judged_claim() -> None:
    claims = claim_table(_scored())
    assert claims["row_key"].to_list() == ["ok", "ok", "ok"]
    assert claims["claim_index"].to_list() == [0, 1, 2]
    assert claims["faithfulness_verdict"].to_list() == ["yes", "no", "unsure"]
    assert claims["hallucination_verdict"].to_list() == ["no", "yes", "no"]


def test_mastra_export_keeps_error_rows_with_null_score() -> None:
    records = list(mastra_records(_scored()))
    assert len(records) == 6
    bad = [r for r in records if r["runId"] == "bad"]
    assert all(r["score"] is None and r["reason"].startswith("claim verdicts failed") for r in bad)
    ok_h = next(r for r in records if r["runId"] == "ok" and r["scorerId"] == "hallucination-scorer")
    assert [v["verdict"] for v in ok_h["analyzeStepResult"]["verdicts"]] == ["no", "yes", "no"]
    assert ok_h["analyzeStepResult"]["verdicts"][1]["statement"] == "Wrong [C]."


def test_resolve_inputs_file_dir_glob(tmp_path: Path) -> None:
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in ("d/a.parquet", "d/sub/b.parquet"):
        pl.DataFrame({"output": ["x"]}).write_parquet(tmp_path / name)
    assert resolve_inputs(tmp_path / "d") == [str(tmp_path / "d/a.parquet"), str(tmp_path / "d/sub/b.parquet")]
    assert resolve_inputs(str(tmp_path / "d" / "*.parquet")) == [str(tmp_path / "d/a.parquet")]
    with pytest.raises(InputError, match="does not exist"):
        resolve_inputs(tmp_path / "nope.parquet")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="holds no"):
        resolve_inputs(tmp_path / "empty")


def test_string_and_large_string_files_agree(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"output": pa.array(["a"], pa.string())}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"output": pa.array(["b"], pa.large_string())}), tmp_path / "b.parquet")
    paths = resolve_inputs(tmp_path)
    assert [file_schema(p)["output"] for p in paths] == [pl.String, pl.String]
    assert [f.height for f in iter_chunks(paths, 10)] == [1, 1]


def test_iter_chunks_bounds_rows(tmp_path: Path) -> None:
    pl.DataFrame({"output": [str(i) for i in range(25)]}).write_parquet(tmp_path / "a.parquet")
    assert [f.height for f in iter_chunks([str(tmp_path / "a.parquet")], 10)] == [10, 10, 5]


def test_atomic_path_leaves_nothing_on_error(tmp_path: Path) -> None:
    target = tmp_path / "out.parquet"
    def fail_midway() -> None:
        with atomic_path(target) as tmp:
            writer = ParquetChunkWriter(tmp)
            writer.write(pl.DataFrame({"a": [1]}))
            writer.close()
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fail_midway()
    assert list(tmp_path.iterdir()) == []
    with atomic_path(target) as tmp:
        writer = ParquetChunkWriter(tmp)
        writer.write(pl.DataFrame({"a": [1]}))
        writer.write(pl.DataFrame({"a": [None]}))  # a later chunk with nulls keeps the first chunk's types
        writer.close()
    assert pl.read_parquet(target)["a"].to_list() == [1, None]


def test_atomic_path_removes_orphans_of_dead_writers_but_not_of_live_ones(tmp_path: Path) -> None:
    target = tmp_path / "out.parquet"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = tmp_path / f".out.parquet.{int(dead.stdout)}-0.tmp"
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        in_progress = tmp_path / f".out.parquet.{live.pid}-0.tmp"
        unrelated = tmp_path / ".other.parquet.1-0.tmp"
        for path in (orphan, in_progress, unrelated):
            path.write_bytes(b"partial")
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"done")
        assert target.read_bytes() == b"done"
        assert not orphan.exists()
        assert in_progress.exists() and unrelated.exists()
    finally:
        live.kill()
        live.wait()
