"""Columns of lists built from flat columns through Arrow: polars has no "lists from offsets" constructor.

Verdict lists are decoded, and published, as one flat row per claim; cutting the flat rows back into one
list per answer by the lists' lengths is a few Arrow buffers, where grouping the rows back together in
polars hashes and copies every one of them.
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa


def arrow_array(series: pl.Series) -> pa.Array:
    """One Arrow array of ``series``; strings stay views, as polars holds them (no copy of the texts)."""
    arr = series.rechunk().to_arrow(compat_level=pl.CompatLevel.newest())
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def lists_of_structs(
    name: str, flat: pl.DataFrame, lengths: pl.Series, missing: pl.Series, dtype: pl.DataType | None = None
) -> pl.Series:
    """Row ``i`` holds the next ``lengths[i]`` rows of ``flat`` as structs of its columns (null where
    ``missing``; a missing row's length must be 0). ``lengths`` must add up to ``flat.height``."""
    offsets = pl.concat([pl.Series([0], dtype=pl.Int64), lengths.cast(pl.Int64).cum_sum()])
    struct = pa.StructArray.from_arrays([arrow_array(flat.get_column(c)) for c in flat.columns], names=flat.columns)
    column = pa.LargeListArray.from_arrays(arrow_array(offsets), struct, mask=arrow_array(missing))
    return pl.Series(name, column, dtype=dtype)
