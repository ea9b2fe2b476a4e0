"""The batch ledger in a PostgreSQL result store: the tables of ``batch.ledger`` in the store's
database, on the store's connection pool, so a batch created by a run on one machine is found, waited
for and read by a run on another."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Final

from faithfulness_pipeline.judging.llm.batch.ledger import BatchLedger
from faithfulness_pipeline.judging.store.postgres import PostgresStore

#: The advisory lock that serialises creating the ledger's tables (any fixed 64-bit number of our own,
#: other than the store's).
_LEDGER_LOCK: Final = 0x66705F6C65_646772

_TABLES: Final = (
    "CREATE TABLE IF NOT EXISTS batch_jobs (submission text PRIMARY KEY, step text NOT NULL, scope text NOT NULL,"
    " input_file_id text NOT NULL, batch_id text, state text NOT NULL, provider_status text, lines integer NOT NULL,"
    " created_at double precision NOT NULL)",
    "CREATE TABLE IF NOT EXISTS batch_lines (custom_id text PRIMARY KEY, submission text NOT NULL, step text NOT NULL,"
    " items text NOT NULL)",
    "CREATE TABLE IF NOT EXISTS batch_items (key bytea PRIMARY KEY, custom_id text NOT NULL)",
    "CREATE INDEX IF NOT EXISTS batch_lines_by_submission ON batch_lines (submission)",
)


def _pg(sql: str) -> str:
    # The shared statements use "?" for parameters and hold no other question mark.
    return sql.replace("?", "%s")


class PostgresBatchLedger(BatchLedger):
    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self._ready = False
        self._lock = threading.Lock()

    def _run(self, work: Any) -> Any:
        with self._lock:
            if not self._ready:
                self.store.run(self._create)
                self._ready = True
        return self.store.run(work)

    @staticmethod
    def _create(conn: Any) -> None:
        # Two workers creating the tables at once would race on CREATE TABLE IF NOT EXISTS: one at a time.
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LEDGER_LOCK,))
            for statement in _TABLES:
                conn.execute(statement)

    def _write(self, statements: Sequence[tuple[str, list[tuple[Any, ...]]]]) -> None:
        def work(conn: Any) -> None:
            with conn.transaction(), conn.cursor() as cur:
                for sql, rows in statements:
                    if rows:
                        cur.executemany(_pg(sql), rows)

        self._run(work)

    def _query(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = self._run(lambda conn: conn.execute(_pg(sql), tuple(params)).fetchall())
        return rows

    def _keys_pending(self, keys: Sequence[bytes]) -> set[bytes]:
        rows = self._run(lambda conn: conn.execute("SELECT key FROM batch_items WHERE key = ANY(%s)",
                                                   (list(keys),)).fetchall())  # fmt: skip
        return {bytes(k) for (k,) in rows}

    def close(self) -> None:
        """Nothing of its own to close: the connections are the store's, closed with it."""
