"""The result store: every validated judge result, persisted the moment its reply is checked.

Why SQLite (in WAL mode), and not DuckDB or a Parquet journal:

* **Crash safety per reply.** Each reply's validated items are one small transaction. In WAL mode a
  commit is an append to the write-ahead log; a process killed at any instant (SIGKILL included) loses
  at most the transaction it was writing, never earlier ones, and the database is never left torn.
  ``synchronous=NORMAL`` skips the fsync per commit: a power cut may lose the last commits, which a
  re-run then pays for again, but can never corrupt the file. A Parquet journal would need one file per
  reply (thousands of tiny files) or rewriting files; DuckDB's single-writer lock would block a second
  process outright.
* **Two processes at once.** WAL lets readers run while one writer commits; writers wait on a busy
  timeout instead of failing. Two scoring runs (two Dagster partitions) can share one store file. Reads
  have a connection of their own, so that a lookup never queues behind a write waiting for another
  process's lock, and the event loop's writes only try (:meth:`ResultStore.try_put_many`): what a locked
  store refuses is written behind (``judging.write_behind``).
* **Fast warm re-runs.** Keys are 16-byte blobs in a ``WITHOUT ROWID`` primary-key table, looked up
  ~900 at a time with one ``IN (...)`` query (each distinct key once): a few hundred thousand lookups
  per second. Finished rows are kept whole (``store.rows``): a warm re-run hashes every row's
  passages again to find its key and decodes the values, both column-wise for a whole chunk (polars
  lays the key content out, SHA-256 reads it straight from the columns' buffers through :func:`spans`
  and :func:`list_spans`, polars parses the values): no Python object per row. Step results (claims of
  an answer, verdicts of claims against passages) are kept too, so that a re-run reuses claims when only
  the passages changed; those are served item by item. The lookups run on a worker thread, next to the
  scoring of the chunk before: hashing a column on two threads of its own only made the threads wait on
  each other for the GIL.
* **Nothing to install, one file to copy or delete.** ``sqlite3`` ships with Python.

What is stored: the key (a hash), the step (``extract``, ``verdict`` or ``row``), a compact JSON value
(the claim texts or the verdicts or both, the original usage, the truncation flag) and a timestamp.
Never a prompt, never an API key: the key hash covers the step, the prompt version, the model and
api_base, the output-changing parameters and the item content, and none of those contain the secret.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Final, TypeVar

from faithfulness_pipeline.judging.store.protocol import SCHEMA_VERSION, Value, key_chunks

T = TypeVar("T")

# Lookups read pages through a memory map instead of one read() call per page, and keep up to 64 MiB
# of pages in SQLite's own cache: a warm re-run probes every key of a chunk.
_MMAP_BYTES: Final = 1 << 30
_CACHE_KIB: Final = 64 * 1024
#: How long a write waits for another process's lock before it fails (off the event loop only).
_BUSY_MS: Final = 60_000


class ResultStore:
    """A SQLite file of results keyed by :class:`KeyMaker` keys. Safe for two processes at once."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._reader: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()

    def open(self) -> None:
        """Opens (creating if needed) the store now, so that a bad path fails before any work."""
        with self._lock:
            self._connection()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=_BUSY_MS / 1000, isolation_level=None,
                                   check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(f"PRAGMA mmap_size = {_MMAP_BYTES}")
            conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS results ("
                " key BLOB PRIMARY KEY, step TEXT NOT NULL, value TEXT NOT NULL, created_at REAL NOT NULL"
                ") WITHOUT ROWID"
            )
            conn.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute("CREATE TABLE IF NOT EXISTS leases (key BLOB PRIMARY KEY, owner TEXT NOT NULL,"
                         " expires_at REAL NOT NULL) WITHOUT ROWID")
            conn.execute(
                "INSERT OR IGNORE INTO meta (name, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
            row = conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
            if row is None or row[0] != str(SCHEMA_VERSION):
                conn.close()
                raise ValueError(
                    f"{self.path} is a result store of schema {row[0] if row else '?'}, this version needs "
                    f"{SCHEMA_VERSION}: point --store at a new file"
                )
            self._conn = conn
        return self._conn

    def _read_connection(self) -> sqlite3.Connection:
        """The connection lookups use (under ``_read_lock``); made after the writer's has set the file up."""
        if self._reader is None:
            with self._lock:
                self._connection()
            conn = sqlite3.connect(self.path, timeout=_BUSY_MS / 1000, isolation_level=None,
                                   check_same_thread=False)
            conn.execute(f"PRAGMA mmap_size = {_MMAP_BYTES}")
            conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
            self._reader = conn
        return self._reader

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, Value]:
        """The stored values of those keys that are present (one query per ~900 keys)."""
        found: dict[bytes, Value] = {}
        if not keys:
            return found
        with self._read_lock:
            conn = self._read_connection()
            for chunk, marks in key_chunks(keys):
                found.update(conn.execute(f"SELECT key, value FROM results WHERE key IN ({marks})", chunk).fetchall())
        return found

    def get_aligned(self, keys: Sequence[bytes]) -> list[Value | None]:
        """The stored value of every key in order (None where absent); each distinct key is asked once."""
        distinct = list(dict.fromkeys(keys))
        found = self.get_many(distinct)
        get = found.get
        return [get(k) for k in keys]

    def put_many(self, rows: Iterable[tuple[bytes, str, Value]]) -> None:
        """Stores ``(key, step, value)`` rows in one transaction, replacing older values of the keys."""
        now = time.time()
        batch = [(k, step, value, now) for k, step, value in rows]
        if not batch:
            return
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            self._insert(conn, batch)

    def try_put_many(self, rows: Sequence[tuple[bytes, str, Value]]) -> bool:
        """:meth:`put_many` if it can be done without waiting for a lock (another thread's or another
        process's); else False at once, and nothing is stored."""
        now = time.time()
        batch = [(k, step, value, now) for k, step, value in rows]
        if not batch:
            return True
        if not self._lock.acquire(blocking=False):
            return False
        try:
            conn = self._connection()
            conn.execute("PRAGMA busy_timeout = 0")
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                    return False
                raise
            finally:
                conn.execute(f"PRAGMA busy_timeout = {_BUSY_MS}")
            self._insert(conn, batch)
            return True
        finally:
            self._lock.release()

    @staticmethod
    def _insert(conn: sqlite3.Connection, batch: list[tuple[bytes, str, Value, float]]) -> None:
        """Inserts ``batch`` in the transaction ``conn`` has begun, and commits."""
        try:
            conn.executemany("INSERT OR REPLACE INTO results (key, step, value, created_at) VALUES (?, ?, ?, ?)",
                             batch)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def claim(self, keys: Sequence[bytes], owner: str, ttl_s: float, takeover: Sequence[str] = ()) -> set[bytes]:
        """Leases ``keys`` to ``owner`` where they are free, expired, its own or a ``takeover`` owner's;
        returns those it holds."""
        if not keys:
            return set()
        now = time.time()
        claimed: set[bytes] = set()
        dead = json.dumps(list(takeover))
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                for chunk, marks in key_chunks(keys):
                    conn.executemany(
                        "INSERT INTO leases (key, owner, expires_at) VALUES (?, ?, ?) ON CONFLICT (key) DO UPDATE "
                        "SET owner = excluded.owner, expires_at = excluded.expires_at "
                        "WHERE leases.owner = excluded.owner OR leases.expires_at < ? "
                        "OR leases.owner IN (SELECT value FROM json_each(?))",
                        [(k, owner, now + ttl_s, now, dead) for k in chunk],
                    )
                    query = f"SELECT key FROM leases WHERE owner = ? AND key IN ({marks})"
                    claimed.update(k for (k,) in conn.execute(query, [owner, *chunk]))
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        return claimed

    def lease_owners(self, keys: Sequence[bytes]) -> set[str]:
        owners: set[str] = set()
        with self._lock:
            conn = self._connection()
            for chunk, marks in key_chunks(keys):
                owners.update(o for (o,) in conn.execute(f"SELECT DISTINCT owner FROM leases WHERE key IN ({marks})",
                                                         chunk))
        return owners

    def release(self, keys: Sequence[bytes], owner: str) -> None:
        if not keys:
            return
        with self._lock:
            conn = self._connection()
            for chunk, marks in key_chunks(keys):
                conn.execute(f"DELETE FROM leases WHERE owner = ? AND key IN ({marks})", [owner, *chunk])

    def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work(connection)`` on the store's connection, one caller at a time (the batch ledger's tables
        live in the same file)."""
        with self._lock:
            return work(self._connection())

    def count(self) -> int:
        with self._read_lock:
            row = self._read_connection().execute("SELECT count(*) FROM results").fetchone()
        return int(row[0])

    def close(self) -> None:
        with self._read_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

