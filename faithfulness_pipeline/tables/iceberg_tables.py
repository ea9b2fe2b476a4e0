"""Apache Iceberg tables in a SQL catalog (``pyiceberg.catalog.sql.SqlCatalog``: a SQLite file, or PostgreSQL),
their data and metadata under the warehouse root, local or in an object store. A table format
(``tables.table_format``) whose every write is a snapshot, so a materialisation's ``table_version`` (the
snapshot id) reads the day back as it published it.

A table partitioned by day has an identity partition on a string column ``ds`` (``YYYY-MM-DD``), which the
readers leave out, as the Parquet format's readers do (its day is the folder, not a column).

Writing a day: the chunks go to a local temporary Parquet file, a row group each (memory holds one chunk).
When the block ends without an error one commit, retried on a conflict, does the rest: the table is created
(or loaded, when another writer created it first), new columns are added (``union_by_name``; older rows read
them as null) and a type that cannot change is refused, the staged rows are copied, a row group at a time,
into one data file of the table with the table's field ids, and one overwrite snapshot removes the day's
previous data files and adds it. pyiceberg 0.12's own ``overwrite`` takes a whole ``pa.Table`` for a
partitioned table (a ``RecordBatchReader`` only for an unpartitioned one) and commits a delete and an append
snapshot; this path keeps memory flat and one snapshot per day. pyiceberg writes the manifests and the
metadata; nothing here writes either by hand.

Reading: counts come from the manifests' record counts; batches and scans read the data files the snapshot's
manifests list, a row group at a time, columns by name (this package never renames a column, so names and
field ids agree), a column a file lacks as null.
"""

from __future__ import annotations

import functools
import os
import random
import re
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.tables.read import parquet_batches
from faithfulness_pipeline.tables.storage import Place, describe, is_remote, scrub
from faithfulness_pipeline.tables.table_format import DAY_COLUMN, FormatSettings
from faithfulness_pipeline.tables.write import ParquetChunkWriter

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table, Transaction
    from pyiceberg.table.metadata import TableMetadata

#: The catalog's name: the SQL catalog stores it with every table (a JDBC catalog of Spark or Trino must use it).
CATALOG_NAME: Final = "faithfulness"
#: The SQLite catalog's file in a local warehouse root, unless ``iceberg_catalog`` names one.
CATALOG_FILE: Final = "_iceberg_catalog.sqlite"
#: Commits tried before a write gives up on a table that other writers keep changing under it.
COMMIT_ATTEMPTS: Final = 12
#: Snapshot summary property naming the day a commit replaced (lineage readable by any engine).
PARTITION_PROPERTY: Final = "faithfulness.partition"
_SETTING: Final = "FP_ICEBERG_CATALOG / warehouse.iceberg_catalog"


def catalog_uri(root: str, setting: str | None) -> str:
    """The SQL catalog's SQLAlchemy URI: the setting, else a SQLite file in a local root; a root in an object store
    has no place for that file, so there the setting is required. ``postgresql://`` means psycopg 3."""
    if setting:
        if setting.startswith("postgresql://") or setting.startswith("postgres://"):
            return "postgresql+psycopg://" + setting.split("://", 1)[1]
        return setting
    if is_remote(root):  # named, not opened: a bucket's place would ask the store for its region
        raise ConfigError(f"{_SETTING} is unset and the warehouse {_shown(root)} is in an object store, which holds no "
                          f"SQLite catalog file: set it (sqlite:////var/lib/fp/catalog.sqlite or "
                          f"postgresql://user@host/db)")
    # Steps in processes of their own commit to the one file: a writer waits up to 30 s for another's lock
    # (sqlite3's default is 5 s, which a busy machine can exceed).
    return f"sqlite:///{Place.of(root).local_path() / CATALOG_FILE}?timeout=30"


def iceberg_tables(settings: FormatSettings) -> IcebergTables:
    """The warehouse's tables in the iceberg format (the ``TABLE_FORMATS`` entry)."""
    return IcebergTables(settings.root_place(), catalog_uri(settings.root, settings.iceberg_catalog),
                         settings.iceberg_namespace,
                         settings.version_retention_days)


def _unmade_sqlite(uri: str) -> bool:
    """Whether ``uri`` is a SQLite catalog whose file does not exist yet (the first write makes it)."""
    if not uri.startswith("sqlite:///"):
        return False
    path = uri.removeprefix("sqlite:///").split("?", 1)[0]
    return bool(path) and path != ":memory:" and not os.path.exists(path)


#: ``scheme://user:password@``: what a message shows of a URL with credentials is ``scheme://***@``.
_USER_INFO: Final = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s?#'\"]*@")


def _shown(text: str) -> str:
    """``text`` (a catalog URI, an error that may quote one) without a URL's user info or a secret of the
    environment (``tables.storage.scrub``)."""
    return scrub(_USER_INFO.sub(r"\1***@", text))


def _file_io_properties(root: Place) -> tuple[tuple[str, str], ...]:
    """pyiceberg's FileIO properties for an S3 root, from the standard AWS variables (never from settings, never
    stored: the catalog keeps only metadata locations)."""
    return s3_properties() if root.scheme == "s3" else ()


def s3_properties() -> tuple[tuple[str, str], ...]:
    """pyiceberg's S3 FileIO properties from the standard AWS variables (also for a landing table, whose data
    may be anywhere its metadata says)."""
    env = os.environ
    pairs = {
        "s3.endpoint": env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"),
        "s3.region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
        "s3.access-key-id": env.get("AWS_ACCESS_KEY_ID"),
        "s3.secret-access-key": env.get("AWS_SECRET_ACCESS_KEY"),
        "s3.session-token": env.get("AWS_SESSION_TOKEN"),
    }
    return tuple(sorted((k, v) for k, v in pairs.items() if v))


@functools.lru_cache(maxsize=16)
def _catalog(uri: str, warehouse: str, properties: tuple[tuple[str, str], ...], pid: int) -> SqlCatalog:
    """One catalog (one SQLAlchemy engine) per URI, warehouse, credentials and process (``pid``: an engine is not
    shared across a fork)."""
    del pid
    from pyiceberg.catalog.sql import SqlCatalog
    from sqlalchemy.exc import SQLAlchemyError

    for attempt in range(3):
        try:
            return SqlCatalog(CATALOG_NAME, uri=uri, warehouse=warehouse, **dict(properties))
        except (SQLAlchemyError, OSError, ValueError) as exc:
            failure = exc
            # Processes opening a new catalog at once race to create its tables: the loser's next try finds them.
            time.sleep(0.2 * (attempt + 1))
    raise ConfigError(f"{_SETTING} {_shown(uri)}: the Iceberg catalog cannot be reached "
                      f"({_shown(describe(failure))}): check the URI and that its database runs")


class IcebergSink:
    """A day's writer: stages every chunk to a local Parquet file (``tables.write.ParquetChunkWriter``)."""

    def __init__(self, empty: pl.Schema | None) -> None:
        descriptor, name = tempfile.mkstemp(prefix=".fp-iceberg-", suffix=".parquet")
        os.close(descriptor)
        self.path = Path(name)
        self._writer = ParquetChunkWriter(self.path, empty)
        self.committed: str | None = None

    def write(self, frame: pl.DataFrame) -> None:
        if DAY_COLUMN in frame.columns:
            raise ConfigError(f"a column named {DAY_COLUMN!r} cannot be written to an iceberg table partitioned by "
                              f"day: {DAY_COLUMN} is the partition column; rename it")
        self._writer.write(frame)

    def close(self) -> pa.Schema | None:
        """The staged rows' schema (None: nothing was written, not even an empty schema)."""
        self._writer.close()
        return pq.read_schema(self.path) if self.path.stat().st_size else None


class IcebergTables:
    """The tables of the warehouse at ``root`` as Iceberg tables of the namespace ``namespace`` in the SQL catalog
    at ``uri``; snapshots older than ``retention_days`` are expired after each write."""

    name = "iceberg"

    def __init__(self, root: Place, uri: str, namespace: str, retention_days: int = 30) -> None:
        if not namespace or not namespace.replace("_", "").isalnum():
            raise ConfigError(f"FP_ICEBERG_NAMESPACE / warehouse.iceberg_namespace {namespace!r} is no namespace "
                              f"name: use letters, digits and _ (e.g. faithfulness)")
        self.root = root
        self.uri = uri
        self.namespace = namespace
        self.retention_days = retention_days

    # -- the catalog and its tables ------------------------------------------------------------------------

    def catalog(self) -> SqlCatalog:
        if not self.root.remote:
            self.root.local_path().mkdir(parents=True, exist_ok=True)  # the SQLite file's folder
        warehouse = self.root.uri if self.root.remote else self.root.local_path().as_uri()
        return _catalog(self.uri, warehouse, _file_io_properties(self.root), os.getpid())

    def identifier(self, table: str) -> tuple[str, str]:
        """``(namespace, name)``: a table ``a/b`` is ``a__b`` (an Iceberg name is one level)."""
        parts = table.split("/")
        if not table or any(not p or not p.replace("_", "").replace("-", "").isalnum() for p in parts):
            raise ConfigError(f"table name {table!r} is no Iceberg table name (letters, digits, _ and -)")
        return self.namespace, "__".join(parts)

    def _load(self, table: str) -> Table | None:
        from pyiceberg.exceptions import NoSuchTableError

        if _unmade_sqlite(self.uri):  # no catalog, no table: a reader does not make the file (nor its folder)
            return None
        try:
            return self.catalog().load_table(self.identifier(table))
        except NoSuchTableError:
            return None

    def _loaded(self, table: str, partition: str | None) -> Table:
        loaded = self._load(table)
        if loaded is None:
            raise FileNotFoundError(self._missing(table, partition))
        return loaded

    def _missing(self, table: str, partition: str | None) -> str:
        namespace, name = self.identifier(table)
        return (f"{table} has no data for partition {partition or '(unpartitioned)'} in the iceberg table "
                f"{namespace}.{name}: materialise it first")

    # -- writing --------------------------------------------------------------------------------------------

    @contextmanager
    def writer(self, table: str, partition: str | None, empty: pl.Schema | None = None) -> Iterator[IcebergSink]:
        self.identifier(table)  # a bad name is refused before any chunk is staged
        sink = IcebergSink(empty)
        try:
            yield sink
            staged = sink.close()
            sink.committed = str(self._commit(table, partition, sink.path, staged))
        finally:
            sink.path.unlink(missing_ok=True)

    def _commit(self, table: str, partition: str | None, staged: Path, schema: pa.Schema | None) -> int:
        """Commits the staged rows as the partition. Another writer's commit in between is redone from the start
        on the refreshed table: a stale metadata pointer pyiceberg's own retries did not get past, the table created
        meanwhile, files of the same day added or removed meanwhile (pyiceberg's ``ValidationException``)."""
        from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError, ValidationException

        for attempt in range(COMMIT_ATTEMPTS):
            written: list[str] = []
            try:
                committed = self._commit_once(table, partition, staged, schema, written)
            except (CommitFailedException, TableAlreadyExistsError, ValidationException):
                self._forget(written)
                if attempt == COMMIT_ATTEMPTS - 1:
                    raise
                time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))  # jitter: writers that collided retry apart
                continue
            except BaseException:
                self._forget(written)
                raise
            self._expire(committed)
            snapshot = committed.current_snapshot()
            assert snapshot is not None
            return snapshot.snapshot_id
        raise AssertionError("unreachable")

    def _forget(self, written: list[str]) -> None:
        """Removes data files of a commit that did not happen (no snapshot lists them)."""
        if not written:
            return
        from pyiceberg.io import load_file_io

        io = load_file_io(self.catalog().properties, location=written[0])
        for path in written:
            with suppress(OSError):
                io.delete(path)

    def _commit_once(self, table: str, partition: str | None, staged: Path, schema: pa.Schema | None,
                     written: list[str]) -> Table:
        from pyiceberg.exceptions import NoSuchTableError
        from pyiceberg.expressions import AlwaysTrue, EqualTo

        catalog = self.catalog()
        identifier = self.identifier(table)
        transaction: Transaction
        if schema is not None:
            # A column polars typed Null (no value in any chunk) has no Iceberg type before format version 3: it
            # is left out, and a later day that has values adds it with their type (this day's rows read null).
            schema = pa.schema([f for f in schema if not pa.types.is_null(f.type)])
        try:
            current = catalog.load_table(identifier)
        except NoSuchTableError:
            if schema is None:
                raise ValueError(f"{table}: nothing was written and the table does not exist yet: give the writer "
                                 f"an empty schema") from None
            _ensure_namespace(catalog, self.namespace)
            first = schema.append(pa.field(DAY_COLUMN, pa.string())) if partition else schema
            transaction = catalog.create_table_transaction(identifier, schema=first)
            if partition:
                with transaction.update_spec() as spec:
                    spec.add_identity(DAY_COLUMN)
        else:
            if bool(partition) != (not current.spec().is_unpartitioned()):
                raise ConfigError(f"the iceberg table {'.'.join(identifier)} is "
                                  f"{'not ' if partition else ''}partitioned by day but this write is "
                                  f"{'for day ' + partition if partition else 'unpartitioned'}: drop the table "
                                  f"or write it as it was created")
            transaction = current.transaction()
            if schema is not None:
                self._evolve(transaction, table, schema)
        metadata = transaction.table_metadata
        data_file = self._write_data_file(transaction, metadata, partition, staged, written)
        properties = {PARTITION_PROPERTY: partition or "(unpartitioned)"}
        with transaction.update_snapshot(snapshot_properties=properties).overwrite() as snapshot:
            # The day is what this snapshot replaces: pyiceberg's own retry of a commit that another writer
            # overtook rebases it onto theirs unless they added or removed files of this same day.
            # (EqualTo is a pydantic model whose own __init__ takes term and literal; mypy sees the fields)
            day = EqualTo(DAY_COLUMN, partition) if partition else AlwaysTrue()  # type: ignore[call-arg, arg-type]
            snapshot.delete_by_predicate(day)
            for old in self._data_files(metadata, transaction._table.io, partition):
                snapshot.delete_data_file(old)
            snapshot.append_data_file(data_file)
        return transaction.commit_transaction()

    def _evolve(self, transaction: Transaction, table: str, staged: pa.Schema) -> None:
        """Adds the staged rows' new columns and widens a column where Iceberg allows it (int to long, float to
        double); a column whose type would change otherwise is refused in one line."""
        from pyiceberg.exceptions import ResolveError
        from pyiceberg.io.pyarrow import _pyarrow_to_schema_without_ids, schema_to_pyarrow
        from pyiceberg.schema import promote
        from pyiceberg.types import PrimitiveType

        current = transaction.table_metadata.schema()
        have = schema_to_pyarrow(current, include_field_ids=False)
        incoming = _pyarrow_to_schema_without_ids(staged)
        wanted = schema_to_pyarrow(incoming, include_field_ids=False)
        new: list[pa.Field] = []
        widen: list[tuple[str, PrimitiveType]] = []
        for field in wanted:
            if field.name not in have.names:
                new.append(field)
                continue
            before = have.field(field.name).type
            if before == field.type:
                continue
            old_type = current.find_field(field.name).field_type
            new_type = incoming.find_field(field.name).field_type
            if isinstance(old_type, PrimitiveType) and isinstance(new_type, PrimitiveType):
                with suppress(ResolveError):
                    promote(new_type, old_type)  # narrower than the table's: cast up when copied
                    continue
                with suppress(ResolveError):
                    promote(old_type, new_type)
                    widen.append((field.name, new_type))
                    continue
            namespace, name = self.identifier(table)
            raise ConfigError(
                f"{table}: column {field.name!r} is {old_type} in the iceberg table {namespace}.{name} and would "
                f"become {new_type}, a change Iceberg refuses: write it as {old_type}, or under a new column name"
            )
        if new or widen:
            with transaction.update_schema() as update:
                if new:
                    update.union_by_name(pa.schema(new))
                for column, widened in widen:
                    update.update_column(column, field_type=widened)

    def _write_data_file(self, transaction: Transaction, metadata: TableMetadata, partition: str | None,
                         staged: Path, written: list[str]) -> DataFile:
        """Copies the staged rows, a row group at a time, into one data file of the table (the table's field ids,
        the day's ``ds``), and describes it with pyiceberg's own statistics of its footer."""
        from pyiceberg.io.pyarrow import (
            compute_statistics_plan,
            data_file_statistics_from_parquet_metadata,
            parquet_path_to_id_mapping,
            schema_to_pyarrow,
        )
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
        from pyiceberg.typedef import Record

        schema = metadata.schema()
        target = schema_to_pyarrow(schema, include_field_ids=True)
        folder = f"{metadata.location.rstrip('/')}/data" + (f"/{DAY_COLUMN}={partition}" if partition else "")
        path = f"{folder}/{uuid.uuid4()}.parquet"
        io = transaction._table.io
        written.append(path)
        with io.new_output(path).create(overwrite=False) as stream, \
                pq.ParquetWriter(stream, target, compression="zstd") as out:
            source = pq.ParquetFile(staged) if staged.stat().st_size else None
            groups = source.metadata.num_row_groups if source is not None else 0
            for group in range(groups):
                assert source is not None
                out.write_table(_conformed(source.read_row_group(group), target, partition))
            if not groups:
                out.write_table(target.empty_table())
        file = io.new_input(path)
        with file.open() as handle:
            footer = pq.read_metadata(handle)
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=footer,
            stats_columns=compute_statistics_plan(schema, metadata.properties),
            parquet_column_mapping=parquet_path_to_id_mapping(schema),
        )
        return DataFile.from_args(
            content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
            # the day, given: a day without rows has no statistics to infer it from
            partition=Record(partition) if partition else Record(),
            file_size_in_bytes=len(file), sort_order_id=None, spec_id=metadata.default_spec_id,
            equality_ids=None, key_metadata=None, **statistics.to_serialized_dict(),
        )

    def _expire(self, table: Table) -> None:
        """Expires snapshots older than the retention (``version_retention_days``); their data files stay (pyiceberg
        0.12 deletes none: docs/table-formats.md says what removes them). Best effort: a conflict leaves it to the
        next write."""
        from pyiceberg.exceptions import CommitFailedException

        cutoff = datetime.now(UTC) - timedelta(days=self.retention_days)
        current = table.current_snapshot()
        keep = current.snapshot_id if current is not None else None
        if any(s.timestamp_ms < cutoff.timestamp() * 1000 and s.snapshot_id != keep for s in table.snapshots()):
            with suppress(CommitFailedException):
                table.maintenance.expire_snapshots().older_than(cutoff).commit()

    # -- reading ---------------------------------------------------------------------------------------------

    @staticmethod
    def _data_files(metadata: TableMetadata, io: Any, partition: str | None,
                    snapshot_id: int | None = None) -> list[DataFile]:
        """The partition's live data files at the snapshot (the current one by default), from the manifests."""
        from pyiceberg.manifest import DataFileContent

        snapshot = metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else metadata.current_snapshot()
        if snapshot is None:
            return []
        files = []
        for manifest in snapshot.manifests(io):
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                data = entry.data_file
                if data.content == DataFileContent.DATA and (partition is None or data.partition[0] == partition):
                    files.append(data)
        return files

    def _files(self, table: str, partition: str | None, as_of: str | None = None) -> tuple[Table, list[DataFile]]:
        loaded = self._loaded(table, partition)
        snapshot_id = self._snapshot_id(loaded, table, as_of)
        files = self._data_files(loaded.metadata, loaded.io, partition, snapshot_id)
        if not files:
            raise FileNotFoundError(self._missing(table, partition))
        return loaded, files

    def _snapshot_id(self, loaded: Table, table: str, as_of: str | None) -> int | None:
        if as_of is None:
            return None
        try:
            snapshot_id = int(as_of)
        except ValueError:
            snapshot_id = -1
        if loaded.metadata.snapshot_by_id(snapshot_id) is None:
            namespace, name = self.identifier(table)
            raise ConfigError(f"{table}: the iceberg table {namespace}.{name} has no snapshot {as_of!r} (never one, "
                              f"or expired after FP_VERSION_RETENTION_DAYS={self.retention_days} days): read a "
                              f"table_version a materialisation recorded within the retention")
        return snapshot_id

    def exists(self, table: str, partition: str | None) -> bool:
        loaded = self._load(table)
        return loaded is not None and bool(self._data_files(loaded.metadata, loaded.io, partition))

    def partitions(self, table: str, as_of: str | None = None) -> list[str | None]:
        """The days with data files in the snapshot (the current one, or ``as_of``)."""
        loaded = self._load(table)
        if loaded is None:
            return []
        files = self._data_files(loaded.metadata, loaded.io, None, self._snapshot_id(loaded, table, as_of))
        if not loaded.metadata.spec().fields:
            return [None] if files else []
        return list(sorted({str(f.partition[0]) for f in files}))

    def rows(self, table: str, partition: str | None) -> int:
        return sum(f.record_count for f in self._files(table, partition)[1])

    def _arrow_schema(self, loaded: Table, snapshot_id: int | None = None) -> pa.Schema:
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        metadata = loaded.metadata
        schema = metadata.schema()
        if snapshot_id is not None:
            snapshot = metadata.snapshot_by_id(snapshot_id)
            if snapshot is not None and snapshot.schema_id is not None:
                schema = next((s for s in metadata.schemas if s.schema_id == snapshot.schema_id), schema)
        arrow = schema_to_pyarrow(schema, include_field_ids=False)
        return pa.schema([f for f in arrow if f.name != DAY_COLUMN])

    def schema(self, table: str, partition: str | None) -> pl.Schema:
        loaded, _ = self._files(table, partition)
        return pl.Schema(pl.from_arrow(self._arrow_schema(loaded).empty_table()).schema)  # type: ignore[union-attr]

    def batches(self, table: str, partition: str | None, rows: int,
                columns: Sequence[str] | None = None) -> Iterator[pl.DataFrame]:
        loaded, files = self._files(table, partition)
        target = self._arrow_schema(loaded)
        if columns is not None:
            target = pa.schema([target.field(c) for c in columns])
        for data in files:
            with loaded.io.new_input(data.file_path).open() as handle:
                parquet = pq.ParquetFile(handle)
                present = [c for c in target.names if c in parquet.schema_arrow.names]
                for batch in parquet_batches(parquet, rows, present):
                    frame = pl.from_arrow(_conformed(pa.Table.from_batches([batch]), target, None))
                    assert isinstance(frame, pl.DataFrame)
                    yield frame

    def scan(self, table: str, partitions: Sequence[str | None], as_of: str | None = None) -> pl.LazyFrame:
        loaded = self._loaded(table, partitions[0] if partitions else None)
        snapshot_id = self._snapshot_id(loaded, table, as_of)
        paths: list[str] = []
        for key in partitions:
            files = self._data_files(loaded.metadata, loaded.io, key, snapshot_id)
            if not files:
                raise FileNotFoundError(self._missing(table, key))
            paths.extend(f.file_path for f in files)
        target = self._arrow_schema(loaded, snapshot_id)
        places = [Place.of(p) for p in paths]
        if not places[0].remote:
            polars_schema = pl.from_arrow(target.empty_table()).schema  # type: ignore[union-attr]
            return pl.scan_parquet([p.path for p in places], schema=dict(polars_schema), missing_columns="insert",
                                   extra_columns="ignore")
        import pyarrow.dataset as pads  # here: it imports pandas, which local warehouses never need

        dataset = pads.dataset([p.path for p in places], schema=target, filesystem=places[0].fs, format="parquet")
        return pl.scan_pyarrow_dataset(dataset)

    def data_files(self, table: str) -> list[Place]:
        """Every data file of the table's current snapshot, every day's (the DuckDB views read these); none for a
        table never written."""
        loaded = self._load(table)
        if loaded is None:
            return []
        return [Place.of(f.file_path) for f in self._data_files(loaded.metadata, loaded.io, None)]

    def location(self, table: str, partition: str | None) -> str:
        loaded = self._load(table)
        namespace, name = self.identifier(table)
        where = loaded.metadata.location.rstrip("/") if loaded is not None else f"{namespace}.{name}"
        return f"{where}/data/{DAY_COLUMN}={partition}" if partition else f"{where}/data"


def _conformed(rows: pa.Table, target: pa.Schema, partition: str | None) -> pa.Table:
    """``rows`` with ``target``'s columns in its order and types: the day's ``ds`` filled in, a column the rows
    lack as null."""
    columns = []
    for field in target:
        if partition and field.name == DAY_COLUMN:
            columns.append(pa.array([partition] * rows.num_rows, field.type))
        elif field.name in rows.column_names:
            columns.append(rows.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(rows.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=target)


def _ensure_namespace(catalog: Any, namespace: str) -> None:
    """The namespace, made where it is missing. The SQL catalog checks, then inserts: two processes making it at
    once both pass the check and the later insert breaks the catalog's unique key (sqlalchemy's IntegrityError,
    not pyiceberg's NamespaceAlreadyExistsError). Made by the other process is made."""
    try:
        catalog.create_namespace_if_not_exists(namespace)
    except Exception:
        if not catalog.namespace_exists(namespace):
            raise
