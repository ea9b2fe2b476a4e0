"""The durable record of provider batch jobs: what was submitted, in which batch, carrying which items.

It lives in the result store, in tables of its own beside the results (in the SQLite file, or in the
database of a ``postgresql://`` store, where run workers on several machines see each other's batches),
because a batch is paid for once it is created and its results arrive hours later, maybe in another
process or on another machine: whatever is needed to find a batch again and to read its output is
committed *before* the next step can lose it.

- a submission is recorded (``creating``, with the uploaded file and a submission tag sent as the
  batch's metadata) before the batch is created, and gets its batch id right after: a run killed in
  between finds its batch again by that tag instead of creating a second one;
- every request line of a batch is recorded with the items it carries (enough to render and parse the
  reply again), and every item's content key points at the line that asks for it: a later run asking
  for the same content waits for that line instead of paying again;
- a batch is ``ingested`` once its output has been read and its results stored; its lines are then
  deleted, and so are the pointers of its items.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from faithfulness_pipeline.core.port import ResultScope, settings_hash
from faithfulness_pipeline.judging.store.protocol import key_chunks
from faithfulness_pipeline.judging.store.sqlite import ResultStore

T = TypeVar("T")

#: A batch's state in the ledger (the provider's own status is kept beside it, as it was last seen).
OPEN_STATES: Final = ("creating", "submitted")


@dataclass(frozen=True, slots=True)
class BatchRecord:
    submission: str  # our tag, sent as the batch's metadata
    step: str
    scope: str  # the judge's settings hash (``core.port.settings_hash``): batches of other settings are not ours
    input_file_id: str
    batch_id: str | None
    state: str  # creating | submitted | ingested
    provider_status: str | None
    lines: int
    created_at: float


@dataclass(frozen=True, slots=True)
class LineRecord:
    custom_id: str
    submission: str
    step: str
    items: list[dict[str, Any]]  # each with "key" (hex), the item's fields and how often it was sent


#: batch_jobs' columns in BatchRecord's order, named in the statements so neither relies on the table's own order.
_JOB_COLUMNS: Final = "submission, step, scope, input_file_id, batch_id, state, provider_status, lines, created_at"


class BatchLedger(ABC):
    """The batch tables of one result store, whatever its backend: the statements are written once here,
    with ``?`` parameters; a backend runs them (:meth:`_write`, :meth:`_query`) on its own connection and
    creates the tables it needs on first use."""

    @abstractmethod
    def _write(self, statements: Sequence[tuple[str, list[tuple[Any, ...]]]]) -> None:
        """Each statement over each of its parameter rows, all in one transaction."""

    @abstractmethod
    def _query(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]: ...

    @abstractmethod
    def _keys_pending(self, keys: Sequence[bytes]) -> set[bytes]:
        """Those of ``keys`` found in ``batch_items`` (the lookup of many keys differs by backend)."""

    @abstractmethod
    def close(self) -> None: ...

    # ------------------------------------------------------------------------------- writing

    def record_submission(self, record: BatchRecord, lines: Sequence[LineRecord]) -> None:
        """The batch about to be created, its lines and its items' pointers, in one transaction."""
        self._write([
            (f"INSERT INTO batch_jobs ({_JOB_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
             [(record.submission, record.step, record.scope, record.input_file_id, record.batch_id, record.state,
               record.provider_status, record.lines, record.created_at)]),
            ("INSERT INTO batch_lines VALUES (?, ?, ?, ?) ON CONFLICT (custom_id) DO UPDATE SET "
             "submission = excluded.submission, step = excluded.step, items = excluded.items",
             [(ln.custom_id, ln.submission, ln.step, json.dumps(ln.items, ensure_ascii=False)) for ln in lines]),
            ("INSERT INTO batch_items VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET custom_id = excluded.custom_id",
             [(bytes.fromhex(item["key"]), ln.custom_id) for ln in lines for item in ln.items]),
        ])

    def record_created(self, submission: str, batch_id: str, status: str) -> None:
        self._write([("UPDATE batch_jobs SET batch_id = ?, state = 'submitted', provider_status = ? "
                      "WHERE submission = ?", [(batch_id, status, submission)])])

    def record_status(self, submission: str, status: str) -> None:
        self._write([("UPDATE batch_jobs SET provider_status = ? WHERE submission = ?", [(status, submission)])])

    def forget_submission(self, submission: str) -> None:
        """A submission whose batch was never created (the create call failed): nothing was paid."""
        self._write([
            ("DELETE FROM batch_items WHERE custom_id IN (SELECT custom_id FROM batch_lines WHERE submission = ?)",
             [(submission,)]),
            ("DELETE FROM batch_lines WHERE submission = ?", [(submission,)]),
            ("DELETE FROM batch_jobs WHERE submission = ?", [(submission,)]),
        ])

    def record_ingested(self, submission: str, status: str) -> None:
        """The batch's output is read and its results stored: its lines are no longer needed."""
        self._write([
            ("DELETE FROM batch_items WHERE custom_id IN (SELECT custom_id FROM batch_lines WHERE submission = ?)",
             [(submission,)]),
            ("DELETE FROM batch_lines WHERE submission = ?", [(submission,)]),
            ("UPDATE batch_jobs SET state = 'ingested', provider_status = ? WHERE submission = ?",
             [(status, submission)]),
        ])

    # ------------------------------------------------------------------------------- reading

    def open_batches(self, scope: ResultScope, step: str) -> list[BatchRecord]:
        """The batches of ``step`` not yet ingested that judges of ``scope`` submitted, oldest first: those
        recorded under its settings hash, and those an earlier version recorded under :func:`earlier_key`."""
        rows = self._query(
            f"SELECT {_JOB_COLUMNS} FROM batch_jobs WHERE scope IN (?, ?) AND step = ? AND state IN (?, ?) "
            "ORDER BY created_at, submission",
            (settings_hash(scope), earlier_key(scope), step, *OPEN_STATES),
        )
        return [BatchRecord(*row) for row in rows]

    def lines_of(self, submission: str) -> dict[str, LineRecord]:
        rows = self._query("SELECT custom_id, submission, step, items FROM batch_lines WHERE submission = ?",
                           (submission,))  # fmt: skip
        return {row[0]: LineRecord(row[0], row[1], row[2], json.loads(row[3])) for row in rows}

    def pending(self, keys: Sequence[bytes]) -> set[bytes]:
        """Those of ``keys`` that a batch not yet ingested is asking for."""
        return self._keys_pending(keys) if keys else set()


_SQLITE_TABLES: Final = (
    "CREATE TABLE IF NOT EXISTS batch_jobs (submission TEXT PRIMARY KEY, step TEXT NOT NULL, scope TEXT NOT NULL,"
    " input_file_id TEXT NOT NULL, batch_id TEXT, state TEXT NOT NULL, provider_status TEXT, lines INTEGER NOT NULL,"
    " created_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS batch_lines (custom_id TEXT PRIMARY KEY, submission TEXT NOT NULL,"
    " step TEXT NOT NULL, items TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS batch_items (key BLOB PRIMARY KEY, custom_id TEXT NOT NULL) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS batch_lines_by_submission ON batch_lines (submission)",
)


class SqliteBatchLedger(BatchLedger):
    """The batch tables in a SQLite store's file, on the store's own connection (WAL, busy timeout: safe for
    several processes)."""

    def __init__(self, store: ResultStore) -> None:
        self.store = store
        self._ready = False

    def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        def ready_then(conn: sqlite3.Connection) -> T:
            if not self._ready:
                for statement in _SQLITE_TABLES:
                    conn.execute(statement)
                self._ready = True
            return work(conn)

        return self.store.run(ready_then)

    def _write(self, statements: Sequence[tuple[str, list[tuple[Any, ...]]]]) -> None:
        def work(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for sql, rows in statements:
                    conn.executemany(sql, rows)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

        self._run(work)

    def _query(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return self._run(lambda conn: list(conn.execute(sql, tuple(params)).fetchall()))

    def _keys_pending(self, keys: Sequence[bytes]) -> set[bytes]:
        def work(conn: sqlite3.Connection) -> set[bytes]:
            found: set[bytes] = set()
            for chunk, marks in key_chunks(keys):
                found.update(k for (k,) in conn.execute(f"SELECT key FROM batch_items WHERE key IN ({marks})", chunk))
            return found

        return self._run(work)

    def close(self) -> None:
        """Nothing of its own to close: the connection is the store's, closed with it."""


def earlier_key(scope: ResultScope) -> str:
    """The key a version before the ledger took ``settings_hash`` recorded its batches under. Still read
    (never written): a batch is paid for when it is created and read hours later, so an upgrade between
    the two must still find it."""
    return hashlib.sha256(repr(scope).encode()).hexdigest()[:32]


def new_submission_tag() -> str:
    """Unique enough across processes and machines: time plus random bits."""
    import secrets

    return f"fp-{int(time.time())}-{secrets.token_hex(6)}"
