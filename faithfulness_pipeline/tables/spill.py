"""A run's rows spilled to temporary Parquet files, so a bulk judge's passes over them read the input once."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl

from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.flow import Rows
from faithfulness_pipeline.core.pipeline import rows_of
from faithfulness_pipeline.core.sampling import EVERY_ROW, Sample


@contextmanager
def spilled_rows(
    chunks: Callable[[], Iterable[pl.DataFrame]], config: ScoringConfig | None, sample: Sample = EVERY_ROW
) -> Iterator[Rows]:
    """``core.pipeline.rows_of`` (the rows in ``sample``), the input read once however often the rows are:
    the first pass keeps each chunk's rows in a temporary Parquet file, later passes read those files (a bulk
    judge reads the rows once per step, and the scoring pass reads the input again: twice in all). The files
    go when the block ends."""
    with tempfile.TemporaryDirectory(prefix="fp-rows-") as folder:
        parts: list[Path] = []
        complete = False

        def rows() -> Iterator[pl.DataFrame]:
            nonlocal complete
            if complete:
                for part in parts:
                    yield pl.read_parquet(part)
                return
            parts.clear()  # a pass that was left midway is no copy of the input: read it again
            for frame in rows_of(chunks, config, sample)():
                part = Path(folder) / f"rows-{len(parts):06d}.parquet"
                frame.write_parquet(part, compression="lz4")
                parts.append(part)
                yield frame
            complete = True

        yield rows
