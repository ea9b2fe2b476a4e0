"""The warehouse: ``<root>/<table>/ds=YYYY-MM-DD/data.parquet``, one file per table and day, on a local disk
or in an object store (``tables.storage``).

Assets stream through it: :meth:`WarehouseResource.writer` takes a day's rows chunk by chunk (a row group
each) and the file appears whole, atomically, when the day is complete; :meth:`~WarehouseResource.batches`
reads a day back in bounded chunks; :meth:`~WarehouseResource.scan` gives a lazy frame for checks and
aggregates (polars' streaming engine); :meth:`~WarehouseResource.rows` counts from the footer. So no
process holds a whole day, whatever its size. The hive layout lets DuckDB, polars, Spark and BI tools read
the day as a column.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import dagster as dg
import polars as pl
import pyarrow.parquet as pq

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.settings.landing import WarehouseSettings
from faithfulness_pipeline.tables.read import parquet_batches
from faithfulness_pipeline.tables.storage import Place
from faithfulness_pipeline.tables.write import ParquetChunkWriter

#: The file of one table partition.
DATA_FILE = "data.parquet"


def _one_component(value: str, what: str) -> None:
    if any(sep in value for sep in ("/", "\\", "\0")) or value in (".", ".."):
        raise ConfigError(f"{what} {value!r} would not be one folder name inside the warehouse")


def _table_name(table: str) -> str:
    """``table`` (``a`` or ``a/b``), refused when it would lead outside the warehouse root."""
    parts = table.split("/")
    if not table or os.path.isabs(table) or any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
        raise ConfigError(f"table name {table!r} leads outside the warehouse root")
    return table


class Staged:
    """A run's staging file: written once, read back in chunks, then deleted."""

    def __init__(self, place: Place) -> None:
        self.place = place

    @contextmanager
    def writer(self) -> Iterator[ParquetChunkWriter]:
        with self.place.replace() as stream:
            writer = ParquetChunkWriter(stream)
            yield writer
            writer.close()

    def batches(self, rows: int) -> Iterator[pl.DataFrame]:
        if not self.place.is_file() or self.place.size() == 0:  # a shard with no rows wrote nothing
            return
        for batch in parquet_batches(pq.ParquetFile(self.place.open_input()), rows):
            frame = pl.from_arrow(batch)
            assert isinstance(frame, pl.DataFrame)
            yield frame

    def delete(self) -> None:
        self.place.delete()
        folder = self.place.parent()
        if folder.is_dir() and not folder.files():  # the run's day folder, once its last file is gone
            folder.delete()


class WarehouseResource(dg.ConfigurableResource, WarehouseSettings):  # type: ignore[type-arg]
    """Where tables are written (see the module docstring). The fields are the ``WarehouseSettings`` fields
    (described there, and in docs/settings.md)."""

    def place(self) -> Place:
        return Place.of(self.root)

    def judge_store(self) -> str | None:
        """The result store of the LLM judge when none is set: a SQLite file in a local warehouse; None for a
        warehouse in an object store, which holds no SQLite file (``JudgeResource.settings`` then asks for one)."""
        root = self.place()
        return None if root.remote else str(root.local_path() / "_judge_store.sqlite")

    def staging(self, run_id: str, partition_key: str, name: str) -> Staged:
        """A file of a run's own, beside the tables (``<root>/_staging/<run>/<day>/<name>``), for what its steps
        hand each other (the shards of a day)."""
        _one_component(run_id, "run id")
        _one_component(partition_key, "partition key")
        _one_component(name, "staging file name")
        return Staged(self.place().child("_staging", run_id, partition_key, name))

    def staged(self, uri: str) -> Staged:
        """The staging file at ``uri`` (as :meth:`staging` named it)."""
        return Staged(Place.of(uri))

    def table(self, table: str) -> Place:
        return self.place().child(_table_name(table))

    def partition(self, table: str, partition_key: str | None) -> Place:
        base = self.table(table)
        if partition_key:
            _one_component(partition_key, "partition key")
            base = base.child(f"ds={partition_key}")
        return base.child(DATA_FILE)

    @contextmanager
    def writer(
        self, table: str, partition_key: str | None, empty: pl.Schema | None = None
    ) -> Iterator[ParquetChunkWriter]:
        """A writer of one partition, chunk by chunk; the partition is replaced when the block ends without
        an error (``empty``: the schema of a day without rows)."""
        target = self.partition(table, partition_key)
        with target.replace() as stream:
            writer = ParquetChunkWriter(stream, empty)
            yield writer
            writer.close()
        for other in target.parent().files(".parquet"):
            # Files another writer (or an older layout) left in this partition would duplicate its rows.
            if other.name != target.name and other.parent().path == target.parent().path:
                other.delete()

    def write(self, table: str, partition_key: str | None, frame: pl.DataFrame) -> Place:
        """Replaces one partition with ``frame`` (a small table: aggregates, tests)."""
        with self.writer(table, partition_key) as out:
            out.write(frame)
        return self.partition(table, partition_key)

    def exists(self, table: str, partition_key: str | None) -> bool:
        return self.partition(table, partition_key).is_file()

    def _file(self, table: str, partition_key: str | None) -> pq.ParquetFile:
        place = self.partition(table, partition_key)
        if not place.is_file():
            raise FileNotFoundError(
                f"{table} has no data for partition {partition_key or '(unpartitioned)'} at {place.uri}: "
                "materialise it first"
            )
        return pq.ParquetFile(place.open_input())

    def rows(self, table: str, partition_key: str | None) -> int:
        """The partition's rows, from its footer."""
        return int(self._file(table, partition_key).metadata.num_rows)

    def table_schema(self, table: str, partition_key: str | None) -> pl.Schema:
        return pl.Schema(self._file(table, partition_key).schema_arrow)

    def batches(
        self, table: str, partition_key: str | None, rows: int, columns: Sequence[str] | None = None
    ) -> Iterator[pl.DataFrame]:
        """The partition in chunks of at most ``rows`` rows (``columns``: only those), in file order."""
        for batch in parquet_batches(self._file(table, partition_key), rows, columns):
            frame = pl.from_arrow(batch)
            assert isinstance(frame, pl.DataFrame)
            yield frame

    def scan(self, table: str, partition_keys: Sequence[str | None]) -> pl.LazyFrame:
        """A lazy frame over these partitions (missing ones refused, as :meth:`batches` does)."""
        places = [self.partition(table, key) for key in partition_keys]
        for key, place in zip(partition_keys, places, strict=True):
            if not place.is_file():
                raise FileNotFoundError(
                    f"{table} has no data for partition {key or '(unpartitioned)'} at {place.uri}: materialise it "
                    "first"
                )
        if not places[0].remote:
            return pl.scan_parquet([p.path for p in places])
        import pyarrow.dataset as pads  # here: it imports pandas, which local warehouses never need

        dataset = pads.dataset([p.path for p in places], filesystem=places[0].fs, format="parquet")
        return pl.scan_pyarrow_dataset(dataset)

    def read(self, table: str, partition_keys: list[str] | None) -> pl.DataFrame:
        """Whole partitions at once (small tables and tests)."""
        keys: list[str | None] = list(partition_keys) if partition_keys else [None]
        frames = [self.scan(table, [key]).collect() for key in keys]
        return frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")
