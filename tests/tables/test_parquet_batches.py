"""Parquet files read in bounded memory: one reader per row group (``tables.read.parquet_batches``).

pyarrow's one ``iter_batches`` reader over a whole file keeps the column chunks of every row group it has
read until it is done, so a run's memory grew with the rows of its input (by the file's compressed size).
These tests pin the structure that bounds it, and that the batches are still those one reader would give.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import faithfulness_pipeline
from faithfulness_pipeline.tables import read as tables_read
from faithfulness_pipeline.tables.read import iter_chunks, parquet_batches


def _file(tmp_path: Path, rows: int, row_group: int) -> Path:
    path = tmp_path / f"in-{rows}-{row_group}.parquet"
    table = pa.table({
        "conversation_id": [f"c{i}" for i in range(rows)],
        "output": [f"answer {i} " * (i % 5) for i in range(rows)],
        "n": list(range(rows)),
    })
    pq.write_table(table, path, row_group_size=row_group)
    return path


@pytest.mark.parametrize("rows", [0, 1, 999, 2_500])
@pytest.mark.parametrize("row_group", [1, 7, 1_000, 2_500])
@pytest.mark.parametrize("batch", [1, 400, 1_000, 5_000])
def test_batches_are_those_of_one_reader(tmp_path: Path, rows: int, row_group: int, batch: int) -> None:
    if rows and rows // row_group > 400:  # one-row groups of thousands of rows add nothing but time
        pytest.skip("too many row groups")
    path = _file(tmp_path, rows, row_group)
    one = list(pq.ParquetFile(path).iter_batches(batch_size=batch))
    ours = list(parquet_batches(pq.ParquetFile(path), batch))
    assert [b.num_rows for b in ours] == [b.num_rows for b in one]
    assert all(a.equals(b) for a, b in zip(ours, one, strict=True))


def test_columns_are_passed_on(tmp_path: Path) -> None:
    path = _file(tmp_path, 2_500, 1_000)
    ours = list(parquet_batches(pq.ParquetFile(path), 400, ["n"]))
    assert all(b.schema.names == ["n"] for b in ours)
    assert pa.Table.from_batches(ours).column("n").to_pylist() == list(range(2_500))


class _Recording(pq.ParquetFile):
    """A ParquetFile that notes which row groups each ``iter_batches`` reader was asked to read."""

    readers: ClassVar[list[Sequence[int] | None]] = []

    def iter_batches(self, *args: Any, **kwargs: Any) -> Iterator[pa.RecordBatch]:
        type(self).readers.append(kwargs.get("row_groups"))
        return super().iter_batches(*args, **kwargs)


def test_iter_chunks_reads_each_row_group_with_a_reader_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(tmp_path, 2_500, 1_000)
    _Recording.readers = []
    monkeypatch.setattr(tables_read.pq, "ParquetFile", _Recording)
    chunks = list(iter_chunks([str(path)], 400))
    # one reader per row group, in file order: none holds what it read past its own row group
    assert _Recording.readers == [[0], [1], [2]]
    assert [c.height for c in chunks] == [400] * 6 + [100]
    assert pl.concat(chunks).get_column("n").to_list() == list(range(2_500))


def test_no_module_reads_a_whole_file_with_one_reader() -> None:
    """Every Parquet read of rows goes through ``parquet_batches``: a new ``iter_batches`` over a whole file
    would bring the growth back."""
    root = Path(faithfulness_pipeline.__file__).parent
    helper = Path(tables_read.__file__)
    offenders = [
        f"{path.relative_to(root)}:{n}"
        for path in sorted(root.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\.iter_batches\(", line) and path != helper
    ]
    assert offenders == []
