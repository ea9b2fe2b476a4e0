"""Folders of Parquet files, partitioned by day: ``<root>/<table>/ds=YYYY-MM-DD/data.parquet``, on a local disk
or in an object store (``tables.storage``). The default table format (``tables.table_format``).

A partition's writer appends a row group per chunk to a temporary file and the file replaces the partition
whole, atomically, when the day is complete; readers take a day back one row group at a time, count rows
from the footer and scan lazily (polars' streaming engine). So no process holds a whole day, whatever its
size, and the hive layout lets DuckDB, polars, Spark and BI tools read the day as a column.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Final

import polars as pl
import pyarrow.parquet as pq

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.tables.read import parquet_batches
from faithfulness_pipeline.tables.storage import Place
from faithfulness_pipeline.tables.table_format import DAY_COLUMN
from faithfulness_pipeline.tables.write import ParquetChunkWriter

#: The file of one table partition.
DATA_FILE: Final = "data.parquet"
#: The folder name of a day's partition: ``ds=`` and the day.
PARTITION_PREFIX: Final = f"{DAY_COLUMN}="


def one_component(value: str, what: str) -> None:
    """Refuses ``value`` (a partition key, a run id) when it would not be one folder name."""
    if any(sep in value for sep in ("/", "\\", "\0")) or value in (".", ".."):
        raise ConfigError(f"{what} {value!r} would not be one folder name inside the warehouse")


def _table_name(table: str) -> str:
    """``table`` (``a`` or ``a/b``), refused when it would lead outside the warehouse root."""
    parts = table.split("/")
    if not table or os.path.isabs(table) or any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
        raise ConfigError(f"table name {table!r} leads outside the warehouse root")
    return table


class ParquetTables:
    """The tables of the warehouse at ``root`` as day-partitioned Parquet files."""

    name = "parquet"

    def __init__(self, root: Place) -> None:
        self.root = root

    def folder(self, table: str) -> Place:
        return self.root.child(_table_name(table))

    def file(self, table: str, partition: str | None) -> Place:
        """The one file of a partition (``<table>/data.parquet`` for a table without partitions)."""
        base = self.folder(table)
        if partition:
            one_component(partition, "partition key")
            base = base.child(f"{PARTITION_PREFIX}{partition}")
        return base.child(DATA_FILE)

    @contextmanager
    def writer(self, table: str, partition: str | None,
               empty: pl.Schema | None = None) -> Iterator[ParquetChunkWriter]:
        target = self.file(table, partition)
        with target.replace() as stream:
            writer = ParquetChunkWriter(stream, empty)
            yield writer
            writer.close()
        for other in target.parent().files(".parquet"):
            # Files another writer (or an older layout) left in this partition would duplicate its rows.
            if other.name != target.name and other.parent().path == target.parent().path:
                other.delete()

    def exists(self, table: str, partition: str | None) -> bool:
        return self.file(table, partition).is_file()

    def partitions(self, table: str, as_of: str | None = None) -> list[str | None]:
        if as_of is not None:
            raise ConfigError(_no_versions(table, as_of))
        folder = self.folder(table)
        days: list[str | None] = [None] if folder.child(DATA_FILE).is_file() else []
        for file in folder.files(DATA_FILE):
            day = file.parent()
            if day.name.startswith(PARTITION_PREFIX) and day.parent().path == folder.path:
                days.append(day.name.removeprefix(PARTITION_PREFIX))
        return days

    def _open(self, table: str, partition: str | None) -> pq.ParquetFile:
        place = self.file(table, partition)
        if not place.is_file():
            raise FileNotFoundError(_missing(table, partition, place))
        return pq.ParquetFile(place.open_input())

    def rows(self, table: str, partition: str | None) -> int:
        return int(self._open(table, partition).metadata.num_rows)

    def schema(self, table: str, partition: str | None) -> pl.Schema:
        return pl.Schema(self._open(table, partition).schema_arrow)

    def batches(self, table: str, partition: str | None, rows: int,
                columns: Sequence[str] | None = None) -> Iterator[pl.DataFrame]:
        for batch in parquet_batches(self._open(table, partition), rows, columns):
            frame = pl.from_arrow(batch)
            assert isinstance(frame, pl.DataFrame)
            yield frame

    def scan(self, table: str, partitions: Sequence[str | None], as_of: str | None = None) -> pl.LazyFrame:
        if as_of is not None:
            raise ConfigError(_no_versions(table, as_of))
        places = [self.file(table, key) for key in partitions]
        for key, place in zip(partitions, places, strict=True):
            if not place.is_file():
                raise FileNotFoundError(_missing(table, key, place))
        if not places[0].remote:
            return pl.scan_parquet([p.path for p in places])
        import pyarrow.dataset as pads  # here: it imports pandas, which local warehouses never need

        dataset = pads.dataset([p.path for p in places], filesystem=places[0].fs, format="parquet")
        return pl.scan_pyarrow_dataset(dataset)

    def location(self, table: str, partition: str | None) -> str:
        return self.file(table, partition).uri


def _no_versions(table: str, as_of: str) -> str:
    return (f"{table} is in the parquet table format, which keeps no versions to read as of {as_of!r}: set "
            "FP_TABLE_FORMAT to a format with versions (docs/table-formats.md)")


def _missing(table: str, partition: str | None, place: Place) -> str:
    return f"{table} has no data for partition {partition or '(unpartitioned)'} at {place.uri}: materialise it first"

