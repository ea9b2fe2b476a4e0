"""Where a warehouse's tables go: the port every table format implements, and the formats by name.

A warehouse holds named tables (``scored_conversations``, ``claim_table``, ...), most of them partitioned by
day. What the rest of the package asks of a table is small: write one partition chunk by chunk, replacing
it only when the block ends without an error (a reader sees the old day or the new, never half); say how
many rows and which columns a partition has; read it back in bounded chunks or as a lazy frame. That is
:class:`TableFormat`. Folders of Parquet files partitioned by day are today's format
(``tables.parquet_tables``); another format (a table with a transaction log, a catalog's table, a database) is
one more implementation and one entry in ``tables.formats.TABLE_FORMATS``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Final, Protocol, runtime_checkable

import polars as pl

from faithfulness_pipeline.tables.storage import Place

#: The column every format partitions a table's days by (``YYYY-MM-DD`` text): the Parquet layout's folder
#: name (``ds=2026-11-24``), the partition column of a Delta or Iceberg table, a PostgreSQL table's day column.
DAY_COLUMN: Final = "ds"


class ChunkSink(Protocol):
    """What a partition's writer takes: one frame at a time, every frame with the same columns.

    ``committed`` is the table version the block committed (a Delta version, an Iceberg snapshot id, a
    PostgreSQL load id), set when the block ends; None before that, and always in a format that keeps no
    versions. It is this write's own version, not the table's latest (another worker may have committed since)."""

    committed: str | None

    def write(self, frame: pl.DataFrame) -> None: ...


class TableFormat(Protocol):
    """The tables of one warehouse in one format. ``partition`` is a day (``YYYY-MM-DD``) or None for a table
    without partitions. A partition that was never written is refused by the readers with an error saying
    to materialise it."""

    #: The format's name, as ``table_format`` settings name it.
    name: str

    def writer(self, table: str, partition: str | None,
               empty: pl.Schema | None = None) -> AbstractContextManager[ChunkSink]:
        """Replaces the partition with the frames written inside the block, when it ends without an error;
        ``empty`` is the schema a partition gets when no frame comes."""
        ...

    def exists(self, table: str, partition: str | None) -> bool: ...

    def partitions(self, table: str, as_of: str | None = None) -> list[str | None]:
        """The partitions the table has (``as_of``: had at that table version), by day; ``[None]`` for a table
        without partitions, ``[]`` for a table never written. What a reader of every day (the ``report``,
        ``compare`` and ``estimate`` commands) hands :meth:`scan`. A version that is not one is refused as
        :meth:`scan` refuses it."""
        ...

    def rows(self, table: str, partition: str | None) -> int:
        """The partition's rows, read from what the format keeps about them (no row is read)."""
        ...

    def schema(self, table: str, partition: str | None) -> pl.Schema: ...

    def batches(self, table: str, partition: str | None, rows: int,
                columns: Sequence[str] | None = None) -> Iterator[pl.DataFrame]:
        """The partition in chunks of at most ``rows`` rows (``columns``: only those), in the order written."""
        ...

    def scan(self, table: str, partitions: Sequence[str | None], as_of: str | None = None) -> pl.LazyFrame:
        """A lazy frame over these partitions; ``as_of``: as they were at that table version (a
        ``committed`` value), refused with one line by a format that keeps no versions."""
        ...

    def location(self, table: str, partition: str | None) -> str:
        """Where the partition is, as a path or URI a person can open (materialisation metadata)."""
        ...


# What some formats can do beyond the port, each checked where it is used (``isinstance`` on the protocol,
# never on a format's class), so that a new format that can do it needs no change there.


@runtime_checkable
class CheckedUpFront(Protocol):
    """A format that can say before any work whether it works here (a database that cannot be reached, a
    setting it lacks), in one line (a ConfigError)."""

    def check(self) -> None: ...


@runtime_checkable
class ListsDataFiles(Protocol):
    """A format whose tables' current data files other readers (the DuckDB views, the report) are handed,
    because they cannot find them themselves (an Iceberg table's files are listed by its catalog)."""

    def data_files(self, table: str) -> list[Place]: ...


@runtime_checkable
class OneFilePerPartition(Protocol):
    """A format whose every partition is one Parquet file that other readers may open as a file (the Parquet
    layout): a reader that wants only some fields of a nested column (the report: two fields of every verdict,
    not its claim's text) reads that file instead of the partition's whole columns."""

    def file(self, table: str, partition: str | None) -> Place: ...


class FormatSettings(Protocol):
    """What a format is built from: the warehouse's settings (``settings.landing.WarehouseSettings``, which this
    layer may not import), as far as a format reads them."""

    @property
    def version_retention_days(self) -> int: ...

    @property
    def root(self) -> str: ...

    def root_place(self) -> Place: ...

    @property
    def iceberg_catalog(self) -> str | None: ...

    @property
    def iceberg_namespace(self) -> str: ...

    @property
    def postgres_url(self) -> str | None: ...

    @property
    def postgres_schema(self) -> str: ...
