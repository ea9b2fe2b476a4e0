"""A Delta table as the landing (``sources.table_landing``): its latest version read a day at a time.

The day's filter goes to the engine twice: delta-rs prunes the table's files by the timestamp column's
min/max statistics in the transaction log (exactly, when the table is partitioned by that column), and the
pyarrow scanner that reads the remaining files skips row groups by their Parquet statistics and filters
rows. The scanner reads ahead a bounded number of batches of one file at a time, so memory follows the
chunk size, not the day.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from typing import TYPE_CHECKING, Any, Final

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc  # not pyarrow.dataset: it imports pandas, which the scoring path never loads

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.tables.day_window import DayWindow, Stamp, days_of
from faithfulness_pipeline.tables.delta_tables import DELTA_LOG, storage_options
from faithfulness_pipeline.tables.read import rechunked
from faithfulness_pipeline.tables.storage import Place, StorageError, describe, scrub

if TYPE_CHECKING:
    from deltalake import DeltaTable

#: Batches of one file the scanner decodes ahead of the reader (pyarrow's default is 16, of up to 16 files).
_READ_AHEAD: Final = 2


def is_delta_table(spec: str) -> bool:
    """Whether ``spec`` is a folder (or prefix) holding a Delta transaction log."""
    try:
        return Place.of(spec).child(DELTA_LOG).is_dir()
    except (StorageError, OSError, ValueError):
        return False


class DeltaLanding:
    """The Delta table at ``uri`` (a local folder or an object-store URI), its version when opened."""

    def __init__(self, uri: str) -> None:
        from deltalake import DeltaTable

        self.uri = uri
        place = Place.of(uri)
        try:
            self._table: DeltaTable = DeltaTable(place.uri, storage_options=storage_options(place))
        except Exception as exc:  # deltalake raises its own TableNotFoundError, OSError, or a Rust panic's text
            raise ConfigError(f"FP_LANDING {scrub(uri)} cannot be opened as a Delta table: "
                              f"{scrub(describe(exc))[:300]}") from None

    @property
    def version(self) -> int:
        return int(self._table.version())

    def schema(self) -> pl.Schema:
        frame = pl.from_arrow(pa.schema(self._table.schema().to_arrow()).empty_table())
        assert isinstance(frame, pl.DataFrame)
        return frame.schema

    def days(self, column: str, stamp: Stamp, timezone: str, undated_day: date | None) -> set[date]:
        scanner = self._dataset(column, None, None).scanner(columns=[column], batch_readahead=_READ_AHEAD,
                                                            fragment_readahead=1)
        return days_of((_frame(b) for b in scanner.to_batches()), column, stamp, timezone, undated_day)

    def _dataset(self, column: str, low: object | None, high: object) -> Any:
        # A file whose statistics rule the range out is never opened; None keeps every file (undated rows).
        pruning = None if low is None else [(column, ">=", low), (column, "<", high)]
        return self._table.to_pyarrow_dataset(file_pruning_predicate=pruning)

    def day_batches(self, column: str, stamp: Stamp, window: DayWindow, rows: int) -> Iterator[pl.DataFrame]:
        low, high = window.bounds(stamp)
        field = pc.field(column)
        in_day = (field >= pa.scalar(low, _arrow_type(self._table, column))) & (
            field < pa.scalar(high, _arrow_type(self._table, column)))
        wanted = in_day | field.is_null() if window.undated else in_day
        dataset = self._dataset(column, None if window.undated else low, high)
        scanner = dataset.scanner(filter=wanted, batch_size=rows, batch_readahead=_READ_AHEAD, fragment_readahead=1)
        frames = (_frame(batch) for batch in scanner.to_batches() if batch.num_rows)
        yield from rechunked(frames, rows)

    def rows_before(self, column: str, stamp: Stamp, window: DayWindow) -> int:
        low, _ = window.bounds(stamp)
        dataset = self._dataset(column, None, None)
        return int(dataset.count_rows(filter=pc.field(column) < pa.scalar(low, _arrow_type(self._table, column))))


def _arrow_type(table: DeltaTable, column: str) -> pa.DataType:
    return pa.schema(table.schema().to_arrow()).field(column).type


def _frame(batch: pa.RecordBatch) -> pl.DataFrame:
    frame = pl.from_arrow(batch)
    assert isinstance(frame, pl.DataFrame)
    return frame
