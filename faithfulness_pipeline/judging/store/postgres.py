"""The result store on PostgreSQL: one store for run workers on different machines.

Same semantics as the SQLite store (``store.sqlite.ResultStore``): the same keys and values, one
transaction per write (a reply's validated items), readers never blocked by writers, concurrent writers
welcome (``INSERT ... ON CONFLICT DO UPDATE``), and a schema version checked when the store is opened.
A pool of psycopg 3 connections (``psycopg_pool``) serves the run's threads: lookups run on worker
threads while the event loop writes what replies bring.

Values keep their type: step results are text, whole rows bytes (``store.rows``), in two columns.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, Final

from faithfulness_pipeline.judging.store.protocol import LOOKUP_CHUNK, SCHEMA_VERSION, StoreError, Value

#: Connections per process: the event loop's writes and a lookup thread or two.
POOL_SIZE: Final = 4
CONNECT_TIMEOUT_S: Final = 10.0

#: The advisory lock that serialises creating the tables (any fixed 64-bit number of our own).
_SCHEMA_LOCK: Final = 0x66705F7374_6F7265

_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS fp_results (key bytea PRIMARY KEY, step text NOT NULL, value text,"
    " blob bytea, created_at double precision NOT NULL)",
    "CREATE TABLE IF NOT EXISTS fp_meta (name text PRIMARY KEY, value text NOT NULL)",
    "CREATE TABLE IF NOT EXISTS fp_leases (key bytea PRIMARY KEY, owner text NOT NULL,"
    " expires_at double precision NOT NULL)",
)


def is_postgres_url(spec: str) -> bool:
    return spec.startswith(("postgresql://", "postgres://"))


def without_password(url: str) -> str:
    """The URL as it may be shown: a password in it (``user:secret@`` or ``password=``) masked."""
    url = re.sub(r"(://[^:/@?]*):[^@/?]*@", r"\1:***@", url)
    return re.sub(r"(?i)(password=)[^&\s]*", r"\1***", url)


class PostgresStore:
    """The result store in a PostgreSQL database, given by a ``postgresql://`` URL (libpq syntax; a Unix
    socket folder goes in ``?host=``). Safe for many processes on many machines at once."""

    def __init__(self, url: str, *, pool_size: int = POOL_SIZE) -> None:
        self.url = url
        self.location = without_password(url)
        self._pool_size = pool_size
        self._pool: Any = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------- connecting

    def open(self) -> None:
        """Connects, creates the tables if needed and checks the schema version, now: a database that is
        down, a refused password or a store of another version fail before any work, in one line."""
        with self._lock:
            self._ensure_pool()

    def _ensure_pool(self) -> Any:
        if self._pool is not None:
            return self._pool
        import psycopg
        from psycopg_pool import ConnectionPool, PoolTimeout

        try:
            # One direct connection first: the pool would retry a refused password until its timeout and
            # then say only that it timed out; libpq's own message names what is wrong.
            with psycopg.connect(self.url, connect_timeout=int(CONNECT_TIMEOUT_S), autocommit=True) as conn:
                # Workers started together on a new database would race on CREATE TABLE IF NOT EXISTS (it is
                # not atomic in PostgreSQL): one at a time, under a transaction-scoped advisory lock.
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    conn.execute("INSERT INTO fp_meta (name, value) VALUES ('schema_version', %s) "
                                 "ON CONFLICT DO NOTHING", (str(SCHEMA_VERSION),))
                row = conn.execute("SELECT value FROM fp_meta WHERE name = 'schema_version'").fetchone()
            if row is None or row[0] != str(SCHEMA_VERSION):
                raise StoreError(f"{self.location} is a result store of schema {row[0] if row else '?'}, this "
                                 f"version needs {SCHEMA_VERSION}: point the store at a new database")
            pool = ConnectionPool(self.url, min_size=1, max_size=self._pool_size, open=True,
                                  timeout=CONNECT_TIMEOUT_S, kwargs={"autocommit": True})
            pool.wait(timeout=CONNECT_TIMEOUT_S)
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"cannot reach the result store {self.location}: {_first_line(exc, self.url)}") from None
        self._pool = pool
        return pool

    def run(self, work: Any) -> Any:
        """``work(connection)`` on a pooled connection; a database error becomes a :class:`StoreError`."""
        import psycopg
        from psycopg_pool import PoolTimeout

        with self._lock:
            pool = self._ensure_pool()
        try:
            with pool.connection() as conn:
                return work(conn)
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"result store {self.location}: {_first_line(exc, self.url)}") from None

    # ------------------------------------------------------------------------------- results

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, Value]:
        if not keys:
            return {}

        def work(conn: Any) -> dict[bytes, Value]:
            found: dict[bytes, Value] = {}
            for start in range(0, len(keys), LOOKUP_CHUNK * 10):
                chunk = list(keys[start : start + LOOKUP_CHUNK * 10])
                rows = conn.execute("SELECT key, value, blob FROM fp_results WHERE key = ANY(%s)", (chunk,))
                for key, text, blob in rows.fetchall():
                    found[bytes(key)] = text if text is not None else bytes(blob)
            return found

        result: dict[bytes, Value] = self.run(work)
        return result

    def get_aligned(self, keys: Sequence[bytes]) -> list[Value | None]:
        found = self.get_many(list(dict.fromkeys(keys)))
        return [found.get(k) for k in keys]

    def put_many(self, rows: Iterable[tuple[bytes, str, Value]]) -> None:
        now = time.time()
        batch = [
            (key, step, value if isinstance(value, str) else None, value if isinstance(value, bytes) else None, now)
            for key, step, value in rows
        ]
        if not batch:
            return

        def work(conn: Any) -> None:
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO fp_results (key, step, value, blob, created_at) VALUES (%s, %s, %s, %s, %s) "
                    "ON CONFLICT (key) DO UPDATE SET step = EXCLUDED.step, value = EXCLUDED.value, "
                    "blob = EXCLUDED.blob, created_at = EXCLUDED.created_at",
                    batch,
                )

        self.run(work)

    def count(self) -> int:
        row = self.run(lambda conn: conn.execute("SELECT count(*) FROM fp_results").fetchone())
        return int(row[0])

    # ------------------------------------------------------------------------------- leases

    def claim(self, keys: Sequence[bytes], owner: str, ttl_s: float, takeover: Sequence[str] = ()) -> set[bytes]:
        """Those of ``keys`` now leased to ``owner`` for ``ttl_s`` seconds: free ones, expired ones, its own
        (renewed) and those of the ``takeover`` owners (known to be dead). A live other owner's are not."""
        if not keys:
            return set()
        now = time.time()

        def work(conn: Any) -> set[bytes]:
            rows = conn.execute(
                "INSERT INTO fp_leases (key, owner, expires_at) SELECT k, %s, %s FROM unnest(%s::bytea[]) AS k "
                "ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at "
                "WHERE fp_leases.owner = EXCLUDED.owner OR fp_leases.expires_at < %s "
                "OR fp_leases.owner = ANY(%s) RETURNING key",
                (owner, now + ttl_s, list(keys), now, list(takeover)),
            ).fetchall()
            return {bytes(k) for (k,) in rows}

        claimed: set[bytes] = self.run(work)
        return claimed

    def lease_owners(self, keys: Sequence[bytes]) -> set[str]:
        if not keys:
            return set()
        rows = self.run(lambda conn: conn.execute("SELECT DISTINCT owner FROM fp_leases WHERE key = ANY(%s)",
                                                   (list(keys),)).fetchall())
        return {str(o) for (o,) in rows}

    def release(self, keys: Sequence[bytes], owner: str) -> None:
        if keys:
            self.run(lambda conn: conn.execute("DELETE FROM fp_leases WHERE owner = %s AND key = ANY(%s)",
                                                (owner, list(keys))))

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None


def _first_line(exc: BaseException, url: str) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    for secret in re.findall(r"://[^:/@?]*:([^@/?]+)@", url) + re.findall(r"(?i)password=([^&\s]+)", url):
        text = text.replace(secret, "***")
    return text[:300]
