"""The warehouse resource: where the Dagster assets' tables are, in the warehouse's table format
(``tables.table_format``; today folders of day-partitioned Parquet files, ``tables.parquet_tables``), on a local
disk or in an object store (``tables.storage``), plus each run's staging files and the result store's default.

Assets stream through it: :meth:`WarehouseResource.writer` takes a day's rows chunk by chunk and the day is
replaced whole when it is complete; :meth:`~WarehouseResource.batches` reads a day back in bounded chunks;
:meth:`~WarehouseResource.scan` gives a lazy frame for checks and aggregates (polars' streaming engine);
:meth:`~WarehouseResource.rows` counts without reading rows. So no process holds a whole day, whatever its size.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager

import dagster as dg
import polars as pl
import pyarrow.parquet as pq

from faithfulness_pipeline.settings.landing import WarehouseSettings
from faithfulness_pipeline.tables.formats import table_format
from faithfulness_pipeline.tables.parquet_tables import ParquetTables, one_component
from faithfulness_pipeline.tables.read import parquet_batches
from faithfulness_pipeline.tables.storage import Place
from faithfulness_pipeline.tables.table_format import CheckedUpFront, ChunkSink, ListsDataFiles, TableFormat
from faithfulness_pipeline.tables.write import ParquetChunkWriter


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

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Opens the tables once when a step starts: a format that cannot work here (the postgres format without
        FP_POSTGRES_URL, or with a database that cannot be reached) stops the step before any work, in one line."""
        tables = self.tables()
        if isinstance(tables, CheckedUpFront):
            tables.check()

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
        one_component(run_id, "run id")
        one_component(partition_key, "partition key")
        one_component(name, "staging file name")
        return Staged(self.place().child("_staging", run_id, partition_key, name))

    def staged(self, uri: str) -> Staged:
        """The staging file at ``uri`` (as :meth:`staging` named it)."""
        return Staged(Place.of(uri))

    def format_name(self) -> str:
        """The warehouse's table format (``tables.formats``), as ``table_format`` names it."""
        return self.table_format

    def tables(self) -> TableFormat:
        """The warehouse's tables, in its table format."""
        return table_format(self.format_name(), self)

    def listed_files(self, tables: Sequence[str]) -> dict[str, list[Place]] | None:
        """The data files of ``tables`` where the format lists them for other readers (the DuckDB views); None
        for the Parquet layout, which they read by its folders, and for Delta tables, whose files those readers
        list from the table's log themselves."""
        formatted = self.tables()
        if not isinstance(formatted, ListsDataFiles):
            return None
        return {table: formatted.data_files(table) for table in tables}

    def partition(self, table: str, partition_key: str | None) -> Place:
        """The file of one partition in the Parquet layout (tests and tools that open files)."""
        return ParquetTables(self.place()).file(table, partition_key)

    def writer(
        self, table: str, partition_key: str | None, empty: pl.Schema | None = None
    ) -> AbstractContextManager[ChunkSink]:
        """A writer of one partition, chunk by chunk; the partition is replaced when the block ends without
        an error (``empty``: the schema of a day without rows)."""
        return self.tables().writer(table, partition_key, empty)

    def write(self, table: str, partition_key: str | None, frame: pl.DataFrame) -> str:
        """Replaces one partition with ``frame`` (a small table: aggregates, tests); where it is."""
        return self.write_committed(table, partition_key, frame)[0]

    def write_committed(self, table: str, partition_key: str | None, frame: pl.DataFrame) -> tuple[str, str | None]:
        """Replaces one partition with ``frame``: where it is and the table version the write committed (None in
        a format without versions)."""
        with self.writer(table, partition_key) as out:
            out.write(frame)
        return self.tables().location(table, partition_key), out.committed

    def exists(self, table: str, partition_key: str | None) -> bool:
        return self.tables().exists(table, partition_key)

    def rows(self, table: str, partition_key: str | None) -> int:
        """The partition's rows, without reading them."""
        return self.tables().rows(table, partition_key)

    def table_schema(self, table: str, partition_key: str | None) -> pl.Schema:
        return self.tables().schema(table, partition_key)

    def batches(
        self, table: str, partition_key: str | None, rows: int, columns: Sequence[str] | None = None
    ) -> Iterator[pl.DataFrame]:
        """The partition in chunks of at most ``rows`` rows (``columns``: only those), in the order written."""
        return self.tables().batches(table, partition_key, rows, columns)

    def scan(self, table: str, partition_keys: Sequence[str | None], as_of: str | None = None) -> pl.LazyFrame:
        """A lazy frame over these partitions (missing ones refused, as :meth:`batches` does); ``as_of``: as
        they were at a table version a materialisation recorded (``table_version``)."""
        return self.tables().scan(table, partition_keys, as_of)

    def location(self, table: str, partition_key: str | None) -> str:
        """Where a partition is, for materialisation metadata."""
        return self.tables().location(table, partition_key)

    def read(self, table: str, partition_keys: list[str] | None) -> pl.DataFrame:
        """Whole partitions at once (small tables and tests)."""
        keys: list[str | None] = list(partition_keys) if partition_keys else [None]
        frames = [self.scan(table, [key]).collect() for key in keys]
        return frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")
