"""A SQLite store (the result store, the label store) that cannot be opened says why: SQLite itself says only
"unable to open database file". A folder where the file should be is checked everywhere; a read-only
filesystem where this machine lets the test mount one (a tmpfs mounted read-only, as root)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from faithfulness_pipeline.review.store import LabelStore, LabelStoreError
from tests.cli.test_cli import SAMPLE, run_cli


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "read-only"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(folder)], capture_output=True,
                             text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_a_result_store_where_a_folder_is_says_so(tmp_path: Path) -> None:
    (tmp_path / "store.sqlite").mkdir()
    done = run_cli("score", str(SAMPLE / "flat"), "-o", str(tmp_path / "out.parquet"), "--store",
                   str(tmp_path / "store.sqlite"), "--quiet")
    assert done.returncode == 2 and "is a folder: name a file in it" in done.stderr, done.stderr
    assert not (tmp_path / "out.parquet").exists()


def test_a_result_store_on_a_read_only_filesystem_says_so(read_only: Path, tmp_path: Path) -> None:
    done = run_cli("score", str(SAMPLE / "flat"), "-o", str(tmp_path / "out.parquet"), "--store",
                   str(read_only / "store.sqlite"), "--quiet")
    assert done.returncode == 2 and "is on a read-only filesystem" in done.stderr, done.stderr


def test_a_label_store_on_a_read_only_filesystem_or_a_folder_says_so(read_only: Path, tmp_path: Path) -> None:
    with pytest.raises(LabelStoreError, match="is on a read-only filesystem"):
        LabelStore(str(read_only / "labels.sqlite")).labels()
    (tmp_path / "labels.sqlite").mkdir()
    with pytest.raises(LabelStoreError, match="is a folder: name a file in it"):
        LabelStore(str(tmp_path / "labels.sqlite")).labels()
