"""Delta Lake tables (delta-rs, the ``deltalake`` library): one table per warehouse table at ``<root>/<table>``
(its ``_delta_log`` inside), on a local disk or in an object store. A table format (``tables.table_format``).

A day is the partition column ``ds`` (a string ``YYYY-MM-DD``). A day's writer stages its chunks in a local
temporary Parquet file (memory stays flat, whatever the day's size), and when the block ends without an error
one ``write_deltalake(mode="overwrite", predicate="ds = '<day>'")`` replaces exactly that day in one commit: a
reader sees the old day or the new one. An error inside the block commits nothing. The commit carries a marker
of its own (custom commit metadata), so the version it created is found even when other writers committed
since. Two writers of different days commit concurrently: delta-rs retries a commit that lost the race when
the winner touched other days, and the writer retries a table creation that lost (two first writes at once).

Rows carry no ``ds`` column when read back: the Parquet layout's rows do not either (their day is the folder),
so both formats give the rest of the package the same columns. Readers count rows from the log's add actions
(no data read), read in bounded batches with the day and the columns pushed down to the files, and read any
past version (``as_of``, a ``committed`` value). A later chunk that adds a column is merged into the table's
schema (older rows read it as null); one whose column changes type is refused, naming the column.

Retention (``version_retention_days``) is the table's ``delta.logRetentionDuration`` and
``delta.deletedFileRetentionDuration``, set when the table is made and brought back to the setting when it
differs: the log of older versions goes at checkpoints, and a ``VACUUM`` (``DeltaTable(uri).vacuum(
dry_run=False)``, which honours the second) may remove their files. Nothing here vacuums on its own: a vacuum
lists the whole table and would race the readers of an old version a person still wants.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.tables.parquet_tables import DATA_FILE, one_component
from faithfulness_pipeline.tables.read import parquet_batches
from faithfulness_pipeline.tables.storage import Place, describe
from faithfulness_pipeline.tables.table_format import DAY_COLUMN
from faithfulness_pipeline.tables.write import ParquetChunkWriter

if TYPE_CHECKING:
    from deltalake import DeltaTable

#: The folder of a Delta table's transaction log.
DELTA_LOG: Final = "_delta_log"
#: The commit metadata key that marks a write as this writer's own (its version is found by it).
WRITE_MARKER: Final = "faithfulness_pipeline.write"
#: The commit metadata key naming the partition a write replaced (a day written with no rows has no file).
PARTITION_MARKER: Final = "faithfulness_pipeline.partition"
#: Commits tried when another writer wins the race to create the table (delta-rs retries other conflicts).
COMMIT_ATTEMPTS: Final = 8
#: Rows per batch handed from the staging file to delta-rs.
STAGED_BATCH_ROWS: Final = 16_384
_DAY_TEXT: Final = re.compile(r"^[0-9A-Za-z_.:+-]+$")
_NULLABILITY: Final = re.compile(r",?\s*(nullable|contains_null|value_contains_null)=(True|False)")


class DeltaTables:
    """The tables of the warehouse at ``root`` as Delta tables partitioned by day (see the module docstring);
    ``retention_days``: how long a replaced version stays readable."""

    name = "delta"

    def __init__(self, root: Place, retention_days: int = 30) -> None:
        self.root = root
        self.retention_days = retention_days

    # -- where ---------------------------------------------------------------------------------------------

    def place(self, table: str) -> Place:
        parts = table.split("/")
        if not table or any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts) or table.startswith("/"):
            raise ConfigError(f"table name {table!r} leads outside the warehouse root")
        return self.root.child(table)

    def uri(self, table: str) -> str:
        return self.place(table).uri

    def storage_options(self) -> dict[str, str]:
        return storage_options(self.root)

    def configuration(self) -> dict[str, str | None]:
        """The table properties the retention setting maps to."""
        interval = f"interval {self.retention_days} days"
        return {"delta.logRetentionDuration": interval, "delta.deletedFileRetentionDuration": interval}

    def _open(self, table: str, version: int | None = None) -> DeltaTable | None:
        """The table (as of ``version``), or None when it was never written."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(self.uri(table), version=version, storage_options=self.storage_options())
        except TableNotFoundError:
            return None

    # -- writing -------------------------------------------------------------------------------------------

    @contextmanager
    def writer(self, table: str, partition: str | None, empty: pl.Schema | None = None) -> Iterator[DeltaChunkSink]:
        if partition is not None:
            one_component(partition, "partition key")
            if not _DAY_TEXT.match(partition):
                raise ConfigError(f"partition key {partition!r} is not a day (YYYY-MM-DD) a Delta predicate can name")
        self.place(table)
        with tempfile.TemporaryDirectory(prefix="fp-delta-") as scratch:
            sink = DeltaChunkSink(Path(scratch) / "staged.parquet", table, partition, empty)
            yield sink
            sink.close()
            sink.committed = str(self._commit(table, partition, sink.staged))

    def _commit(self, table: str, partition: str | None, staged: Path) -> int:
        """Replaces the partition with the staged rows in one commit; the version that commit created."""
        from deltalake import CommitProperties, Transaction, write_deltalake
        from deltalake.exceptions import CommitFailedError, DeltaError

        marker = uuid.uuid4().hex
        metadata = {WRITE_MARKER: marker, PARTITION_MARKER: partition or ""}
        # The partition's application transaction: the snapshot of every later version says the partition was
        # written, even with no row (an empty day has no file), without a read of the history.
        written = Transaction(app_id=_app_id(partition), version=time.time_ns())
        predicate = None if partition is None else f"{DAY_COLUMN} = '{partition}'"
        for attempt in range(COMMIT_ATTEMPTS):
            current = self._open(table)
            source = pq.ParquetFile(staged)
            if current is None:
                self._check_empty(table)
            else:
                self._check_schema(table, partition, current, source.schema_arrow)
                self._keep_retention(current)
            reader = pa.RecordBatchReader.from_batches(
                source.schema_arrow, parquet_batches(source, STAGED_BATCH_ROWS))
            try:
                write_deltalake(
                    current if current is not None else self.uri(table),
                    reader,
                    mode="overwrite",
                    predicate=predicate,
                    schema_mode="merge",
                    partition_by=None if partition is None else [DAY_COLUMN],
                    configuration=self.configuration() if current is None else None,
                    storage_options=None if current is not None else self.storage_options(),
                    commit_properties=CommitProperties(custom_metadata=metadata, app_transactions=[written]),
                )
            except CommitFailedError:
                # Another writer committed what this one's commit depended on (most often: both made the table
                # at once). A fresh look at the table and the staged rows again; nothing of this try is visible.
                if attempt == COMMIT_ATTEMPTS - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
                continue
            except DeltaError as exc:
                raise ConfigError(f"{table}: Delta write to {self.uri(table)} failed: {describe(exc)}") from None
            return self._version_of(table, current, marker)
        raise AssertionError("unreachable")

    def _version_of(self, table: str, written: DeltaTable | None, marker: str) -> int:
        """The version whose commit carries ``marker``: the table object's own after its write (checked against
        its commit), else the first from version 0 on (a table this write made, maybe after another writer's
        commits). The commit files are read directly: delta-rs's history listing never ends on some S3 servers."""
        version = int(written.version()) if written is not None else 0
        log = self.place(table).child(DELTA_LOG)
        for candidate in itertools.chain([version], itertools.count(version + 1)):
            commit = log.child(f"{candidate:020d}.json")
            if not commit.is_file():
                break
            if _commit_marker(commit.read_text()) == marker:
                return candidate
        raise RuntimeError(f"{table}: the commit of this write is not in {self.uri(table)}'s log")

    def _check_empty(self, table: str) -> None:
        """Refuses to make a Delta table where files of another layout are (the Parquet format's days): the
        table would ignore them, and a folder's readers would take them for its data. Only that format's file
        name counts: the data files of another writer making the same table at this moment are no reason."""
        if any(f.name == DATA_FILE for f in self.place(table).files(".parquet")):
            raise ConfigError(f"{table}: {self.uri(table)} holds Parquet files but no Delta table (another table "
                              f"format wrote it): move the folder away, or keep FP_TABLE_FORMAT at that format")

    def _check_schema(self, table: str, partition: str | None, current: DeltaTable, incoming: pa.Schema) -> None:
        """Refuses rows that would change a column's type, or put days into a table without them (or back)."""
        from deltalake import Schema

        old = {f.name: f.type for f in current.schema().fields}
        partitioned = DAY_COLUMN in current.metadata().partition_columns
        if partitioned != (partition is not None):
            shape = "by day" if partitioned else "without days"
            raise ConfigError(f"{table} at {self.uri(table)} is a Delta table {shape}; this write "
                              f"{'has no day' if partition is None else 'is of one day'}: move the table away, "
                              f"or write it as it was made")
        for field in Schema.from_arrow(incoming).fields:
            before = old.get(field.name)
            if before is not None and _type_text(before) != _type_text(field.type):
                raise ConfigError(
                    f"{table}: column {field.name!r} is {_type_text(before)} in the Delta table at "
                    f"{self.uri(table)} and {_type_text(field.type)} in the rows written now: a column's type "
                    f"cannot change; write it under a new name, or move the table away to start it anew"
                )

    def _keep_retention(self, current: DeltaTable) -> None:
        """Brings the table's retention properties back to the setting when they differ (a changed setting)."""
        wanted = self.configuration()
        have = current.metadata().configuration
        if any(have.get(key) != value for key, value in wanted.items()):
            current.alter.set_table_properties({k: v for k, v in wanted.items() if v is not None},
                                               raise_if_not_exists=False)

    # -- reading -------------------------------------------------------------------------------------------

    def _table(self, table: str, version: int | None = None) -> DeltaTable:
        found = self._open(table, version)
        if found is None:
            raise FileNotFoundError(f"{table} has no Delta table at {self.uri(table)}: materialise it first")
        return found

    def _files(self, current: DeltaTable, partition: str | None) -> pa.Table:
        """The add actions (files) of ``partition`` (all of them for a table without days)."""
        actions = pa.table(current.get_add_actions(flatten=True))
        if partition is None or f"partition.{DAY_COLUMN}" not in actions.column_names:
            return actions
        days = actions.column(f"partition.{DAY_COLUMN}").to_pylist()
        return actions.filter(pa.array([d == partition for d in days], pa.bool_()))

    def _written(self, current: DeltaTable, partition: str | None) -> bool:
        """Whether ``partition`` is in the table at ``current``'s version: it has files, or a write of it left its
        application transaction (a day written with no row has no file)."""
        return current.transaction_version(_app_id(partition)) is not None or bool(
            self._files(current, partition).num_rows)

    def _present(self, table: str, partition: str | None, version: int | None = None) -> DeltaTable:
        current = self._table(table, version)
        if not self._written(current, partition):
            raise FileNotFoundError(f"{table} has no data for partition {partition or '(unpartitioned)'} in "
                                    f"{self.uri(table)}: materialise it first")
        return current

    def exists(self, table: str, partition: str | None) -> bool:
        current = self._open(table)
        return current is not None and self._written(current, partition)

    def partitions(self, table: str, as_of: str | None = None) -> list[str | None]:
        """The days with files at the version (a day written with no rows has none, and no rows to read)."""
        current = self._open(table) if as_of is None else self._table(table, self._version(table, as_of))
        if current is None:
            return []
        actions = self._files(current, None)
        if f"partition.{DAY_COLUMN}" not in actions.column_names:
            return [None] if self._written(current, None) else []
        found = {str(d) for d in actions.column(f"partition.{DAY_COLUMN}").to_pylist() if d is not None}
        return list(sorted(found))

    def rows(self, table: str, partition: str | None) -> int:
        current = self._present(table, partition)
        counts = self._files(current, partition).column("num_records").to_pylist()
        if any(n is None for n in counts):  # a writer that kept no statistics: the files' footers say
            return int(self._dataset(current, partition).count_rows())
        return int(sum(counts))

    def schema(self, table: str, partition: str | None) -> pl.Schema:
        current = self._present(table, partition)
        frame = pl.from_arrow(pa.schema(current.schema().to_arrow()).empty_table())
        assert isinstance(frame, pl.DataFrame)
        return pl.Schema({k: v for k, v in frame.schema.items() if k != DAY_COLUMN or partition is None})

    def _dataset(self, current: DeltaTable, partition: str | None) -> Any:
        filters = None if partition is None else [(DAY_COLUMN, "=", partition)]
        return current.to_pyarrow_dataset(file_pruning_predicate=filters)

    def batches(self, table: str, partition: str | None, rows: int,
                columns: Sequence[str] | None = None) -> Iterator[pl.DataFrame]:
        current = self._present(table, partition)
        names = [n for n in current.schema().to_arrow().names if n != DAY_COLUMN or partition is None]
        wanted = names if columns is None else [c for c in columns if c in names]
        for batch in self._dataset(current, partition).to_batches(columns=wanted, batch_size=rows):
            if batch.num_rows == 0:
                continue
            frame = pl.from_arrow(batch)
            assert isinstance(frame, pl.DataFrame)
            yield frame

    def scan(self, table: str, partitions: Sequence[str | None], as_of: str | None = None) -> pl.LazyFrame:
        version = None if as_of is None else self._version(table, as_of)
        current = self._table(table, version)
        for key in partitions:
            if not self._written(current, key):
                when = "" if version is None else f" as of version {version}"
                raise FileNotFoundError(f"{table} has no data for partition {key or '(unpartitioned)'}{when} in "
                                        f"{self.uri(table)}: materialise it first")
        frame = pl.scan_delta(self.uri(table), version=current.version(), storage_options=self.storage_options()
                              or None)
        days = [k for k in partitions if k is not None]
        if not days:
            return frame
        return frame.filter(pl.col(DAY_COLUMN).is_in(days)).drop(DAY_COLUMN)

    def _version(self, table: str, as_of: str) -> int:
        """``as_of`` as a version of the table; anything else is one line naming it."""
        current = self._table(table)
        latest = current.version()
        if not as_of.strip().isdigit() or int(as_of) > latest:
            raise ConfigError(f"{table}: {as_of!r} is not a version of the Delta table at {self.uri(table)} "
                              f"(its versions are 0 to {latest}): give a table_version a materialisation recorded")
        version = int(as_of)
        if self._open(table, version) is None:
            raise ConfigError(f"{table}: version {version} of the Delta table at {self.uri(table)} is past its "
                              f"retention ({self.retention_days} days, FP_VERSION_RETENTION_DAYS): it can no longer "
                              f"be read")
        return version

    def location(self, table: str, partition: str | None) -> str:
        return self.uri(table)


def storage_options(place: Place) -> dict[str, str]:
    """What delta-rs needs beyond its own reading of the environment (credentials, profile): an S3-compatible
    endpoint over plain HTTP must be allowed as such, and the region given when only the SDK's other spelling
    sets it."""
    if place.scheme != "s3":
        return {}
    options: dict[str, str] = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["AWS_ENDPOINT_URL"] = endpoint
        if endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        options["AWS_REGION"] = region
    return options


def live_files(table: Place) -> list[Place] | None:
    """The data files of the Delta table at ``table`` in its latest version (a Delta table keeps the files of
    replaced versions beside them: a reader of the folder would read those too); None when no Delta table is
    there. For readers that take files (the report, the DuckDB views)."""
    if not table.child(DELTA_LOG).is_dir():
        return None
    from deltalake import DeltaTable

    current = DeltaTable(table.uri, storage_options=storage_options(table))
    paths = pa.table(current.get_add_actions(flatten=True)).column("path").to_pylist()
    return [table.child(path) for path in sorted(paths)]


class DeltaChunkSink:
    """A day's frames, staged in a local Parquet file until the block ends (``DeltaTables.writer`` commits
    them); each frame gets the day column."""

    def __init__(self, staged: Path, table: str, partition: str | None, empty: pl.Schema | None) -> None:
        self.staged = staged
        self.table = table
        self.partition = partition
        self.committed: str | None = None
        day_empty = None if empty is None else self._with_day(pl.DataFrame(schema=empty)).schema
        self._writer = ParquetChunkWriter(staged, day_empty)

    def _with_day(self, frame: pl.DataFrame) -> pl.DataFrame:
        if self.partition is None:
            return frame
        if DAY_COLUMN in frame.columns:
            raise ConfigError(f"{self.table}: the rows have a column {DAY_COLUMN!r}, the Delta table's day column: "
                              f"rename it")
        return frame.with_columns(pl.lit(self.partition, pl.String).alias(DAY_COLUMN))

    def write(self, frame: pl.DataFrame) -> None:
        self._writer.write(self._with_day(frame))

    def close(self) -> None:
        self._writer.close()
        if not self.staged.exists():
            raise ConfigError(f"{self.table}: nothing was written and no schema given for an empty partition: "
                              f"pass the schema of an empty day")


def _app_id(partition: str | None) -> str:
    """The application transaction id of a partition's writes."""
    return f"{PARTITION_MARKER}:{partition or ''}"


def _commit_marker(log_entry: str) -> str | None:
    """The write marker of a commit file (newline-delimited JSON actions), from its commitInfo."""
    for line in log_entry.splitlines():
        action = json.loads(line) if line.strip() else {}
        info = action.get("commitInfo")
        if isinstance(info, dict):
            value = info.get(WRITE_MARKER)
            return str(value) if value is not None else None
    return None


def _type_text(dtype: Any) -> str:
    """A Delta type as text (``string``, ``long``, ``struct<...>``), without nullability: polars' columns are all
    nullable, and delta-rs may say either."""
    text = _NULLABILITY.sub("", repr(dtype))
    primitive = re.fullmatch(r'PrimitiveType\("(\w+)"\)', text)
    return primitive.group(1) if primitive else text
