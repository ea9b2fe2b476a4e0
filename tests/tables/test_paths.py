"""Which files an input names and where an output goes, with the paths users really give (issue 40): symlinks
in an input folder (each real file once, no walk that loops: a link to ``.`` made one row 41 rows, two such
links a walk of about 2^40 paths), compressed tables, and output paths through folders that do not exist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.tables.inputs import resolve_inputs

ROW = {"conversation_id": "c1", "input": "Where is the tower?", "output": "The tower is in Paris.",
       "context": ["The tower stands in Paris."]}  # fmt: skip


def _jsonl(path: Path, key: str = "c1") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame([{**ROW, "conversation_id": key}]).write_ndjson(path)
    return path


@pytest.fixture
def looped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``in/`` with one file and two links back to itself (``self -> .``, ``again -> ..``/in)."""
    folder = tmp_path / "in"
    _jsonl(folder / "day.jsonl")
    (folder / "self").symlink_to(".")
    (folder / "again").symlink_to(folder)
    monkeypatch.chdir(tmp_path)
    return folder


@pytest.mark.parametrize("spec", ["in", "in/**/*.jsonl", "in/**", "**/*.jsonl", "in/*.jsonl", "./in/*.jsonl"])
def test_a_folder_linked_to_itself_is_walked_once(looped: Path, spec: str) -> None:
    # named as the pattern names its folder, as glob does
    assert resolve_inputs(spec) == [os.path.join("." if spec.startswith("./") else "", "in", "day.jsonl")]


def test_a_glob_through_a_loop_that_matches_nothing_says_so(looped: Path) -> None:
    # in/self/day.jsonl is in/day.jsonl: the walk does not enter a folder it has already walked
    with pytest.raises(InputError, match="matches no files"):
        resolve_inputs("in/*/*.jsonl")


def test_two_names_of_one_file_are_read_once_under_the_real_name(tmp_path: Path) -> None:
    real = _jsonl(tmp_path / "in" / "2026-11-25.jsonl")
    (tmp_path / "in" / "latest.jsonl").symlink_to(real.name)
    (tmp_path / "in" / "a-copy-by-link.jsonl").symlink_to(real)
    for spec in (tmp_path / "in", f"{tmp_path}/in/*.jsonl", f"{tmp_path}/**/*.jsonl"):
        assert resolve_inputs(spec) == [str(real)], spec


def test_a_linked_folder_elsewhere_is_followed_and_its_files_come_once(tmp_path: Path) -> None:
    elsewhere = _jsonl(tmp_path / "archive" / "old.jsonl")
    mine = _jsonl(tmp_path / "in" / "new.jsonl", "c2")
    (tmp_path / "in" / "archive").symlink_to(tmp_path / "archive")
    (tmp_path / "in" / "archive-again").symlink_to(tmp_path / "archive")
    assert resolve_inputs(tmp_path / "in") == [str(tmp_path / "in" / "archive" / "old.jsonl"), str(mine)]
    assert resolve_inputs(tmp_path / "**" / "*.jsonl") == [str(elsewhere), str(mine)]


def test_a_wildcard_skips_hidden_names_and_dangling_links(tmp_path: Path) -> None:
    kept = _jsonl(tmp_path / "in" / "day.jsonl")
    _jsonl(tmp_path / "in" / ".hidden.jsonl")
    _jsonl(tmp_path / "in" / ".cache" / "day.jsonl")
    (tmp_path / "in" / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    assert resolve_inputs(f"{tmp_path}/in/**/*.jsonl") == [str(kept)]
    assert resolve_inputs(f"{tmp_path}/in/.cache/*.jsonl") == [str(tmp_path / "in" / ".cache" / "day.jsonl")]


def test_the_cli_scores_a_looped_folder_s_row_once(looped: Path, tmp_path: Path) -> None:
    (looped / "self2").symlink_to(".")  # two loops at once: glob.glob would walk for ever
    out = tmp_path / "out.parquet"
    done = subprocess.run([sys.executable, "-m", "faithfulness_pipeline.cli", "score", "in/**/*.jsonl", "-o", str(out),
                           "--quiet"], capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert pl.read_parquet(out).get_column("conversation_id").to_list() == ["c1"]


def test_a_compressed_table_is_named_never_read_as_parquet_or_skipped(tmp_path: Path) -> None:
    """issue 40: a .jsonl.gz was read "as Parquet" (a confusing error) when named, and skipped without a word
    in a folder (its rows missing from the run)."""
    import gzip

    plain = _jsonl(tmp_path / "in" / "a.jsonl")
    packed = tmp_path / "in" / "b.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    (tmp_path / "in" / "notes.txt.gz").write_bytes(gzip.compress(b"not a table"))
    for spec in (packed, tmp_path / "in", f"{tmp_path}/in/*"):
        with pytest.raises(InputError, match=r"b\.jsonl\.gz' is gzip-compressed.*gzip -d"):
            resolve_inputs(spec)
    packed.unlink()
    assert resolve_inputs(tmp_path / "in") == [str(plain)]  # a compressed file that is no table is no input


def test_an_output_path_through_a_folder_that_does_not_exist_leaves_no_folder(tmp_path: Path) -> None:
    """issue 40: -o nope/../x.parquet wrote x.parquet and left an empty folder nope/."""
    src = _jsonl(tmp_path / "in" / "day.jsonl")
    for extra in ((), ("--claims-out", "gone/../claims.parquet")):
        done = subprocess.run([sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(src), "-o",
                               "nope/deeper/../../x.parquet", "--quiet", *extra], capture_output=True, text=True,
                              timeout=120, check=False, cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in", "x.parquet", *(["claims.parquet"] if extra
                                                                                           else [])])  # fmt: skip
        assert pl.read_parquet(tmp_path / "x.parquet").height == 1
