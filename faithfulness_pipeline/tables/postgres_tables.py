"""The warehouse's tables as PostgreSQL tables (``table_format = postgres``; ``tables.table_format``).

In the schema ``FP_POSTGRES_SCHEMA`` (default ``faithfulness``) of the database ``FP_POSTGRES_URL``:

- ``_loads``: one row per load (a partition written once): its id, table, day, time, rows, the polars schema it
  was written with, and, once another load of the same day replaced it, which one and when.
- ``<table>__versions``: the rows of every kept load of the table, each with its load id (``_load_id``), its
  position in the load (``_row``) and its day (``ds``), then the table's columns.

A day is replaced in one transaction: a new load is recorded, its rows are copied in chunk by chunk
(``COPY ... FROM STDIN``), the day's former load is marked replaced by it, and the transaction commits. The
current rows are those of loads that no other load replaced, so a reader sees the old day or the new, never half
(an error inside the block rolls everything back: the old day stays current). Replaced loads keep their rows,
so the table reads back as of any load id (``scan(..., as_of=)``) until ``version_retention_days`` after it was
replaced, when the next write of the table deletes them.

Creating a table, or a column a later version adds (``ALTER TABLE ... ADD COLUMN``: old rows read it as null),
happens in its own short transaction under an advisory lock, so workers writing several days of a new table at
once do not race on ``CREATE TABLE IF NOT EXISTS``; a column whose type would change is refused. Writers
copy their rows in parallel and queue on an advisory lock only to commit (a few statements), so a load's
``version`` is the order loads committed in.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

import polars as pl

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.tables.postgres_connect import checked_url, connect, shown
from faithfulness_pipeline.tables.postgres_types import is_nested, pg_type, schema_bytes, schema_of, to_json
from faithfulness_pipeline.tables.table_format import DAY_COLUMN

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

#: Columns the format adds to every table's rows: a table's own columns may not take these names.
LOAD_ID: Final = "_load_id"
ROW: Final = "_row"
DAY: Final = DAY_COLUMN
RESERVED: Final = (LOAD_ID, ROW, DAY)
#: The suffix of a table's rows (its bare name is left for a view over its current rows: ``defs.postgres_views``).
ROWS_SUFFIX: Final = "__versions"
LOADS: Final = "_loads"
#: The sequence that orders loads as they commit: reading "as of" a load reads each day's last load before it.
VERSIONS: Final = "_load_versions"
#: PostgreSQL's longest identifier in bytes: a longer one would be cut silently.
MAX_NAME: Final = 63
#: The advisory locks (64-bit hashes of these and the schema or table) of creating tables and columns, and of
#: committing a load.
_DDL_LOCK: Final = "faithfulness-pipeline ddl:"
_COMMIT_LOCK: Final = "faithfulness-pipeline commit:"
_LOCK: Final = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
#: Rows fetched from the server at a time (a batch of more is gathered from several).
FETCH_ROWS: Final = 2_000
#: Rows a scan reads per batch at most: polars' hint may be larger (100,000 rows, a whole typical day, held at once
#: with its nested columns decoded), so the hint is capped here.
SCAN_BATCH: Final = 10_000


def _day(partition: str | None) -> dt.date | None:
    if partition is None:
        return None
    try:
        return dt.date.fromisoformat(partition)
    except ValueError:
        raise ConfigError(f"partition key {partition!r} is no day (YYYY-MM-DD): the postgres table format "
                          "partitions tables by day") from None


class _Load:
    """One load of a partition as ``_loads`` records it."""

    def __init__(self, load_id: int, rows: int, schema: bytes) -> None:
        self.load_id, self.rows, self.schema = load_id, rows, schema_of(schema)


class PostgresTables:
    """The tables of a warehouse as PostgreSQL tables in schema ``schema`` of the database at ``url`` (see the
    module docstring); replaced loads are kept ``retention_days``."""

    name = "postgres"

    def __init__(self, url: str | None, schema: str = "faithfulness", retention_days: int = 30) -> None:
        self.url = checked_url(url)
        if not schema or len(schema.encode()) > MAX_NAME:
            raise ConfigError(f"FP_POSTGRES_SCHEMA / warehouse.postgres_schema {schema!r} is no schema name "
                              f"(1 to {MAX_NAME} bytes)")
        self.pg_schema = schema
        self.retention_days = retention_days

    def check(self) -> None:
        """Connects once: a database that cannot be reached, or a refused password, is one line naming
        FP_POSTGRES_URL before a step does any work."""
        with self._reading():
            pass

    # ------------------------------------------------------------------------------- names

    def qualified(self, name: str) -> sql.Identifier:
        from psycopg import sql

        return sql.Identifier(self.pg_schema, name)

    def rows_identifier(self, table: str) -> sql.Identifier:
        name = table + ROWS_SUFFIX
        if not table or len(name.encode()) > MAX_NAME or "\0" in table:
            raise ConfigError(f"table name {table!r} is too long for PostgreSQL ({MAX_NAME - len(ROWS_SUFFIX)} "
                              "bytes at most) or empty")
        return self.qualified(name)

    def rows_table(self, table: str) -> str:
        """The qualified name of ``table``'s rows (every kept load), as SQL writes it."""
        return f'"{self.pg_schema}"."{table}{ROWS_SUFFIX}"'

    # ------------------------------------------------------------------------------- creating

    def _ensure(self, conn: psycopg.Connection[Any], table: str, schema: pl.Schema) -> None:
        """Creates what is missing for ``table`` with ``schema`` (the schema, ``_loads``, the table, new columns)
        and refuses a column whose type would change; its own transaction, committed."""
        for column in schema:
            if column in RESERVED:
                raise ConfigError(f"{table} has a column {column!r}, a name the postgres table format keeps for "
                                  f"itself ({', '.join(RESERVED)}): rename the column")
            if len(column.encode()) > MAX_NAME:
                raise ConfigError(f"{table} has a column {column[:20]!r}... longer than PostgreSQL's {MAX_NAME} "
                                  "bytes: rename it")
        wanted = {c: pg_type(d) for c, d in schema.items()}
        if self._missing(conn, table, schema, wanted):
            conn.rollback()
            # Workers starting on a new table together would race on CREATE TABLE IF NOT EXISTS (not atomic in
            # PostgreSQL): one at a time, under a transaction-scoped advisory lock, then look again. The lock is
            # the table's: a process writing two tables at once (claims and verdicts) never waits on itself.
            # A wait no one ends (a lock held by a writer that waits on this one) is an error, not a hang.
            conn.execute("SET LOCAL lock_timeout = '60s'")
            if not self._has_loads(conn):
                conn.execute(_LOCK, (_DDL_LOCK + self.pg_schema,))
                if not self._has_loads(conn):
                    self._create_loads(conn)
            conn.execute(_LOCK, (f"{_DDL_LOCK}{self.pg_schema}.{table}",))
            self._create(conn, table)
            missing = self._missing(conn, table, schema, wanted)
            from psycopg import sql

            for column in missing:
                conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
                    self.rows_identifier(table), sql.Identifier(column), sql.SQL(wanted[column])))
        conn.commit()

    def _missing(self, conn: psycopg.Connection[Any], table: str, schema: pl.Schema,
                 wanted: dict[str, str]) -> list[str]:
        """The columns of ``schema`` the table lacks (all, and more, when it is not there); a column of another
        type is one line naming the table, the column, both types and the fix."""
        found = conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped",
            (self.rows_table(table),)).fetchall()
        if not found:
            return [LOAD_ID, *schema]
        have = {str(name): str(kind) for name, kind in found}
        for column, kind in wanted.items():
            # An all-null column (dtype Null) fits any type the table has.
            if column in have and have[column] != kind and schema[column] != pl.Null:
                raise ConfigError(
                    f"{table}.{column} is {have[column]} in PostgreSQL ({self.rows_table(table)}) but this write "
                    f"brings {schema[column]} ({kind}): a column's type cannot change; cast it back to the old "
                    "type, or write it under a new column name")
        return [c for c in wanted if c not in have]

    def _create_loads(self, conn: psycopg.Connection[Any]) -> None:
        """The schema, ``_loads`` and the sequence, once: ``CREATE INDEX IF NOT EXISTS`` would lock ``_loads``
        against the open loads of other writers even when the index is there."""
        from psycopg import sql

        loads, versions = self.qualified(LOADS), self.qualified(VERSIONS)
        for statement in (
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.pg_schema)),
            sql.SQL("CREATE TABLE IF NOT EXISTS {} (load_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
                    "table_name text NOT NULL, ds date, started_at timestamptz NOT NULL DEFAULT clock_timestamp(), "
                    "loaded_at timestamptz, version bigint UNIQUE, rows bigint, polars_schema bytea NOT NULL, "
                    "replaced_by bigint, replaced_at timestamptz, purged_at timestamptz)").format(loads),
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (table_name, ds, version)").format(
                sql.Identifier(f"{LOADS}_by_day"), loads),
            sql.SQL("CREATE SEQUENCE IF NOT EXISTS {}").format(versions),
        ):
            conn.execute(statement)

    def _create(self, conn: psycopg.Connection[Any], table: str) -> None:
        from psycopg import sql

        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({} bigint NOT NULL, {} bigint NOT NULL, {} date, "
                    "PRIMARY KEY ({}, {}))").format(
                self.rows_identifier(table), sql.Identifier(LOAD_ID), sql.Identifier(ROW), sql.Identifier(DAY),
                sql.Identifier(LOAD_ID), sql.Identifier(ROW)))

    # ------------------------------------------------------------------------------- writing

    @contextmanager
    def writer(self, table: str, partition: str | None,
               empty: pl.Schema | None = None) -> Iterator[PostgresSink]:
        day = _day(partition)
        self.rows_identifier(table)  # a bad name is refused before connecting
        conn = connect(self.url)
        try:
            sink = PostgresSink(self, conn, table, day, empty)
            try:
                yield sink
                sink.finish()
            except BaseException:
                conn.rollback()  # the load, its rows and the replacing: none of it happened
                raise
            self._purge(conn, table)
        finally:
            conn.close()

    def _purge(self, conn: psycopg.Connection[Any], table: str) -> None:
        """Deletes the rows of ``table``'s loads replaced more than ``retention_days`` ago (their ``_loads``
        record stays, marked purged, so reading as of one says why it cannot); one transaction."""
        from psycopg import sql

        old = conn.execute(
            sql.SQL("UPDATE {} SET purged_at = clock_timestamp() WHERE table_name = %s AND purged_at IS NULL AND "
                    "replaced_at < clock_timestamp() - make_interval(days => %s) RETURNING load_id").format(
                self.qualified(LOADS)), (table, self.retention_days)).fetchall()
        if old:
            conn.execute(sql.SQL("DELETE FROM {} WHERE {} = ANY(%s)").format(
                self.rows_identifier(table), sql.Identifier(LOAD_ID)), ([r[0] for r in old],))
        conn.commit()

    # ------------------------------------------------------------------------------- reading

    @contextmanager
    def _reading(self) -> Iterator[psycopg.Connection[Any]]:
        conn = connect(self.url)
        try:
            yield conn
        finally:
            conn.close()

    def _has_loads(self, conn: psycopg.Connection[Any]) -> bool:
        found = conn.execute("SELECT to_regclass(%s)", (f'"{self.pg_schema}"."{LOADS}"',)).fetchone()
        return found is not None and found[0] is not None

    def _load(self, conn: psycopg.Connection[Any], table: str, partition: str | None,
              as_of: str | None = None) -> _Load | None:
        """The partition's current load, or the one current right after load ``as_of`` committed."""
        from psycopg import sql

        if not self._has_loads(conn):
            return None
        day = _day(partition)
        if as_of is None:
            found = conn.execute(
                sql.SQL("SELECT load_id, rows, polars_schema FROM {} WHERE table_name = %s AND ds IS NOT DISTINCT "
                        "FROM %s AND version IS NOT NULL AND replaced_by IS NULL ORDER BY version DESC LIMIT 1"
                        ).format(self.qualified(LOADS)), (table, day)).fetchone()
            return _Load(*found) if found else None
        version = self._version(conn, table, as_of)
        found = conn.execute(
            sql.SQL("SELECT load_id, rows, polars_schema, purged_at FROM {} WHERE table_name = %s AND ds IS NOT "
                    "DISTINCT FROM %s AND version <= %s ORDER BY version DESC LIMIT 1").format(self.qualified(LOADS)),
            (table, day, version)).fetchone()
        if found is None:
            return None
        if found[3] is not None:
            raise FileNotFoundError(
                f"{table} partition {partition or '(unpartitioned)'} as of load {as_of} was replaced more than "
                f"FP_VERSION_RETENTION_DAYS ({self.retention_days}) ago and its rows are deleted: read a later "
                "version, or keep versions longer")
        return _Load(found[0], found[1], found[2])

    def _version(self, conn: psycopg.Connection[Any], table: str, as_of: str) -> int:
        from psycopg import sql

        if not as_of.isdigit():
            raise ConfigError(f"{table}: as_of {as_of!r} is no load id of the postgres table format (a "
                              "materialisation's table_version, a number)")
        found = conn.execute(sql.SQL("SELECT version FROM {} WHERE load_id = %s").format(self.qualified(LOADS)),
                             (int(as_of),)).fetchone()
        if found is None or found[0] is None:
            raise ConfigError(f"{table}: there is no committed load {as_of} in {shown(self.url)} schema "
                              f"{self.pg_schema!r}: use a table_version a materialisation recorded")
        return int(found[0])

    def _loaded(self, conn: psycopg.Connection[Any], table: str, partition: str | None,
                as_of: str | None = None) -> _Load:
        load = self._load(conn, table, partition, as_of)
        if load is None:
            raise FileNotFoundError(
                f"{table} has no data for partition {partition or '(unpartitioned)'} in "
                f"{self.location(table, partition)}{f' as of load {as_of}' if as_of else ''}: materialise it first")
        return load

    def partitions(self, table: str, as_of: str | None = None) -> list[str | None]:
        """The partitions of ``table`` that have a current load (``as_of``: a load committed up to that one), by
        day (None: the table has no partitions)."""
        from psycopg import sql

        with self._reading() as conn:
            if not self._has_loads(conn):
                return []
            if as_of is None:
                query = sql.SQL("SELECT DISTINCT ds FROM {} WHERE table_name = %s AND replaced_by IS NULL AND "
                                "version IS NOT NULL ORDER BY ds").format(self.qualified(LOADS))
                found = conn.execute(query, (table,)).fetchall()
            else:
                query = sql.SQL("SELECT DISTINCT ds FROM {} WHERE table_name = %s AND version <= %s ORDER BY ds"
                                ).format(self.qualified(LOADS))
                found = conn.execute(query, (table, self._version(conn, table, as_of))).fetchall()
        return [None if r[0] is None else r[0].isoformat() for r in found]

    def exists(self, table: str, partition: str | None) -> bool:
        with self._reading() as conn:
            return self._load(conn, table, partition) is not None

    def rows(self, table: str, partition: str | None) -> int:
        with self._reading() as conn:
            return int(self._loaded(conn, table, partition).rows)

    def schema(self, table: str, partition: str | None) -> pl.Schema:
        with self._reading() as conn:
            return self._loaded(conn, table, partition).schema

    def batches(self, table: str, partition: str | None, rows: int,
                columns: Sequence[str] | None = None) -> Iterator[pl.DataFrame]:
        with self._reading() as conn:
            load = self._loaded(conn, table, partition)
            wanted = list(columns) if columns is not None else list(load.schema)
            unknown = [c for c in wanted if c not in load.schema]
            if unknown:
                raise ConfigError(f"{table} partition {partition} has no column(s) {', '.join(unknown)}")
            yield from self._load_batches(conn, table, load, pl.Schema({c: load.schema[c] for c in wanted}), rows)

    def _load_batches(self, conn: psycopg.Connection[Any], table: str, load: _Load, schema: pl.Schema,
                      rows: int) -> Iterator[pl.DataFrame]:
        """The rows of ``load`` with ``schema``'s columns (one it lacks reads as null), ``rows`` at a time, in the
        order written, through a server-side cursor: the database holds the result, not this process."""
        from psycopg import sql

        if not schema:  # no column asked for: only how many rows
            for start in range(0, load.rows, max(rows, 1)):
                yield pl.DataFrame(height=min(rows, load.rows - start))
            return
        selected: list[sql.Composable] = []
        for column, dtype in schema.items():
            if column not in load.schema:
                selected.append(sql.SQL("NULL"))
            elif is_nested(dtype):
                selected.append(sql.SQL("{}::text").format(sql.Identifier(column)))  # polars decodes the JSON
            else:
                selected.append(sql.Identifier(column))
        query = sql.SQL("SELECT {} FROM {} WHERE {} = %s ORDER BY {}").format(
            sql.SQL(", ").join(selected), self.rows_identifier(table), sql.Identifier(LOAD_ID), sql.Identifier(ROW))
        read_as = {c: pl.String() if is_nested(d) else d for c, d in schema.items()}
        nested = [pl.col(c).str.json_decode(d) for c, d in schema.items() if is_nested(d)]
        # Rows arrive as Python tuples, many times the size of the frame they make: a few thousand at a time,
        # gathered into frames of ``rows``.
        rows = max(rows, 1)
        fetch = min(rows, FETCH_ROWS)
        with conn.transaction(), conn.cursor(name=f"fp_rows_{load.load_id}") as cursor:
            cursor.itersize = fetch
            cursor.execute(query, (load.load_id,))
            gathered: list[pl.DataFrame] = []
            held = 0
            while chunk := cursor.fetchmany(min(fetch, rows - held)):  # never more than ``rows`` a batch
                frame = pl.DataFrame(chunk, schema=read_as, orient="row")
                gathered.append(frame.with_columns(nested) if nested else frame)
                held += frame.height
                if held >= rows:
                    yield pl.concat(gathered, rechunk=True)
                    gathered, held = [], 0
            if gathered:
                yield pl.concat(gathered, rechunk=True)

    def scan(self, table: str, partitions: Sequence[str | None], as_of: str | None = None) -> pl.LazyFrame:
        """A lazy frame over the partitions: which load each one reads is settled now (a missing partition is
        refused now, and a load written after this call is not read); its rows are read when the frame is
        collected, a batch at a time through a server-side cursor, only the columns the query uses."""
        from polars.io.plugins import register_io_source

        with self._reading() as conn:
            loads = [self._loaded(conn, table, key, as_of) for key in partitions]
        schema: dict[str, pl.DataType] = {}
        for load in loads:
            for column, dtype in load.schema.items():
                schema.setdefault(column, dtype)
        full = pl.Schema(schema)

        def source(with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None,
                   batch_size: int | None) -> Iterator[pl.DataFrame]:
            wanted = pl.Schema({c: full[c] for c in (with_columns if with_columns is not None else list(full))})
            left = n_rows
            with self._reading() as conn:
                for load in loads:
                    for frame in self._load_batches(conn, table, load, wanted, min(batch_size or SCAN_BATCH,
                                                                                      SCAN_BATCH)):
                        if predicate is not None:
                            frame = frame.filter(predicate)
                        if left is not None:
                            frame = frame.head(left)
                            left -= frame.height
                        yield frame
                        if left is not None and left <= 0:
                            return

        return register_io_source(io_source=source, schema=full)

    def location(self, table: str, partition: str | None) -> str:
        day = f"?ds={partition}" if partition else ""
        return f"{shown(self.url)}#{self.pg_schema}.{table}{ROWS_SUFFIX}{day}"


class PostgresSink:
    """A partition's writer: the load's transaction, its rows copied in as frames come."""

    def __init__(self, tables: PostgresTables, conn: psycopg.Connection[Any], table: str, day: dt.date | None,
                 empty: pl.Schema | None) -> None:
        self.tables, self.conn, self.table, self.day, self.empty = tables, conn, table, day, empty
        self.committed: str | None = None
        self._schema: pl.Schema | None = None
        self._load_id = 0
        self._rows = 0

    def _begin(self, schema: pl.Schema) -> None:
        """Creates what the rows need (its own transaction), then opens the load's: records the load."""
        from psycopg import sql

        self.tables._ensure(self.conn, self.table, schema)
        self._schema = schema
        found = self.conn.execute(
            sql.SQL("INSERT INTO {} (table_name, ds, polars_schema) VALUES (%s, %s, %s) RETURNING load_id").format(
                self.tables.qualified(LOADS)), (self.table, self.day, schema_bytes(schema))).fetchone()
        assert found is not None
        self._load_id = int(found[0])

    def write(self, frame: pl.DataFrame) -> None:
        from psycopg import sql

        if self._schema is None:
            self._begin(frame.schema)
        assert self._schema is not None
        if frame.schema != self._schema:
            raise ValueError(f"{self.table}: a chunk's columns {frame.schema} differ from the first chunk's "
                             f"{self._schema}: every chunk of a partition has the same columns")
        if frame.is_empty():
            return
        names = list(self._schema)
        copy_sql = sql.SQL("COPY {} ({}) FROM STDIN").format(
            self.tables.rows_identifier(self.table),
            sql.SQL(", ").join(sql.Identifier(c) for c in (LOAD_ID, ROW, DAY, *names)))
        nested = [i for i, d in enumerate(self._schema.values()) if is_nested(d)]
        with self.conn.cursor() as cursor, cursor.copy(copy_sql) as copy:
            for offset, values in enumerate(frame.iter_rows()):
                row: list[Any] = list(values)
                for i in nested:
                    row[i] = to_json(row[i])
                copy.write_row((self._load_id, self._rows + offset, self.day, *row))
        self._rows += frame.height

    def finish(self) -> None:
        """Makes the load the day's current one and commits: the day's former load is replaced in the same
        transaction."""
        from psycopg import sql

        if self._schema is None:
            self._begin(self.empty if self.empty is not None else pl.Schema())
        loads = self.tables.qualified(LOADS)
        # Writers queue here only to commit (a few statements): the version a load takes is then the order loads
        # commit in, so "as of a load" is exactly what was committed before it, and of two writers of one day
        # the second replaces the first.
        self.conn.execute(_LOCK, (f"{_COMMIT_LOCK}{self.tables.pg_schema}",))
        self.conn.execute(
            sql.SQL("UPDATE {} SET replaced_by = %s, replaced_at = clock_timestamp() WHERE table_name = %s AND ds IS "
                    "NOT DISTINCT FROM %s AND replaced_by IS NULL AND version IS NOT NULL AND load_id <> %s"
                    ).format(loads), (self._load_id, self.table, self.day, self._load_id))
        self.conn.execute(
            sql.SQL("UPDATE {} SET rows = %s, version = nextval(%s), loaded_at = clock_timestamp() "
                    "WHERE load_id = %s").format(loads),
            (self._rows, f'"{self.tables.pg_schema}"."{VERSIONS}"', self._load_id))
        self.conn.commit()
        self.committed = str(self._load_id)
