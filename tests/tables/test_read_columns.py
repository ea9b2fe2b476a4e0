"""``read_all(spec, columns=...)``: the light columns of a large table read across files and formats, the
others never read (so a text column whose type differs between two files does not matter)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.tables.read import read_all


def test_only_the_named_columns_are_read_from_every_file_and_format(tmp_path: Path) -> None:
    pl.DataFrame({"row_key": ["a", "b"], "score": [0.1, 0.2], "answer": ["埃菲尔铁塔", "에펠탑"]}).write_parquet(
        tmp_path / "1.parquet")
    pl.DataFrame({"row_key": ["c"], "answer": [3]}).write_parquet(tmp_path / "2.parquet")
    pl.DataFrame({"row_key": ["d"], "score": [0.4], "answer": ["x"]}).write_ndjson(tmp_path / "3.jsonl")
    with pytest.raises(InputError, match="disagree on column 'answer'"):
        read_all(str(tmp_path))
    got = read_all(str(tmp_path), columns={"row_key", "score", "absent"})
    expected = pl.DataFrame({"row_key": ["a", "b", "c", "d"], "score": [0.1, 0.2, None, 0.4]})
    assert_frame_equal(got, expected, check_row_order=False)
