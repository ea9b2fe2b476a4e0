"""The label store: people's labels of scored answers, one row per answer and reviewer, in a SQLite file or a
PostgreSQL database (the result store's database may hold it too: its tables are named otherwise).

Every write is one committed transaction before the call returns, so a label is durable the moment it is
given: SQLite in WAL mode with ``synchronous = FULL`` syncs the log on each commit (the result store's
``NORMAL`` may lose the last commits to a power cut, which a re-run pays for again; a person's label cannot be
asked for again), PostgreSQL commits in autocommit mode. A reviewer who changes their mind replaces their
label (an upsert on the answer and reviewer), undo deletes it, and two reviewers never touch each other's
rows. Several processes may share one store (two review pages, an import while a page serves).

A PostgreSQL URL's password is never shown: every message names the store by :attr:`LabelStore.location`
(the URL without it), and the database's own error text is scrubbed of it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TypeVar
from urllib.parse import unquote, urlsplit

import polars as pl

from faithfulness_pipeline.core.errors import FaithfulnessPipelineError
from faithfulness_pipeline.judging.store.postgres import is_postgres_url, without_password
from faithfulness_pipeline.tables.sqlite_files import open_failure

T = TypeVar("T")

TABLE: Final = "labels"
#: Where a label came from: the review page, an imported table, Phoenix's human annotations.
SOURCES: Final = ("review", "import", "phoenix")
#: A claim's verdict as people give it (the judge's three, speculative aside).
CLAIM_VERDICTS: Final = ("supported", "contradicted", "unsupported")
#: File suffixes read as a SQLite label store rather than as a table.
STORE_SUFFIXES: Final = (".sqlite", ".sqlite3", ".db")

#: The columns, and their types in (SQLite, PostgreSQL); the key is (row_key, reviewer).
COLUMNS: Final = {
    "row_key": ("TEXT NOT NULL", "text NOT NULL"),
    "reviewer": ("TEXT NOT NULL", "text NOT NULL"),
    "label_hallucinated": ("INTEGER", "boolean"),
    "label_faithfulness": ("REAL", "double precision"),
    "claim_labels": ("TEXT NOT NULL", "text NOT NULL"),
    "labelled_at": ("TEXT NOT NULL", "timestamptz NOT NULL"),
    "content_hash": ("TEXT", "text"),
    "scoring_run_id": ("TEXT", "text"),
    "judge_model": ("TEXT", "text"),
    "prompt_version": ("TEXT", "text"),
    "inclusion_probability": ("REAL", "double precision"),
    "source": ("TEXT NOT NULL", "text NOT NULL"),
}
#: The store read as a labels table (``read_labels``).
FRAME_SCHEMA: Final = pl.Schema({
    "row_key": pl.String(), "reviewer": pl.String(), "label_hallucinated": pl.Boolean(),
    "label_faithfulness": pl.Float64(), "claim_labels": pl.String(), "labelled_at": pl.Datetime("us", "UTC"),
    "content_hash": pl.String(), "scoring_run_id": pl.String(), "judge_model": pl.String(),
    "prompt_version": pl.String(), "inclusion_probability": pl.Float64(), "source": pl.String(),
})
_NAMES: Final = tuple(COLUMNS)
#: Serialises creating the table among PostgreSQL clients (CREATE TABLE IF NOT EXISTS is not atomic there).
_SCHEMA_LOCK: Final = 0x66705F6C6162656C
_BUSY_S: Final = 30.0
#: Row keys per ``IN (...)``: below SQLite's oldest limit on a statement's parameters (999).
_KEYS_PER_QUERY: Final = 500
_CONNECT_TIMEOUT_S: Final = 10


class LabelStoreError(FaithfulnessPipelineError):
    """A label store that cannot be opened, read or written; the message never holds a password."""


@dataclass(frozen=True, slots=True)
class Label:
    """One reviewer's label of one answer, with what they saw (``content_hash``) and what scored it."""

    row_key: str
    reviewer: str
    label_hallucinated: bool | None
    label_faithfulness: float | None = None
    #: ``{"claim_index", "claim", "verdict"}`` per claim the reviewer marked.
    claim_labels: tuple[dict[str, Any], ...] = ()
    labelled_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    content_hash: str | None = None
    scoring_run_id: str | None = None
    judge_model: str | None = None
    prompt_version: str | None = None
    inclusion_probability: float | None = None
    source: str = "review"

    def values(self) -> tuple[Any, ...]:
        return (self.row_key, self.reviewer, self.label_hallucinated, self.label_faithfulness,
                json.dumps(list(self.claim_labels), ensure_ascii=False), self.labelled_at.astimezone(UTC),
                self.content_hash, self.scoring_run_id, self.judge_model, self.prompt_version,
                self.inclusion_probability, self.source)


def is_store(spec: str) -> bool:
    """Whether ``spec`` names a label store (a ``postgresql://`` URL, ``sqlite://``, or a ``*.sqlite``,
    ``*.sqlite3`` or ``*.db`` file) rather than a table of labels."""
    return is_postgres_url(spec) or spec.startswith("sqlite://") or spec.lower().endswith(STORE_SUFFIXES)


def shown(spec: str) -> str:
    """``spec`` as a message may show it: a URL's password masked."""
    return without_password(spec) if "://" in spec else spec


def _secrets(url: str) -> list[str]:
    """The password of a URL (as written and decoded) and of ``password=`` pairs: what a message must not hold."""
    found = re.findall(r"(?i)password=([^&\s]+)", url)
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    if password:
        found += [password, unquote(password)]
    return [s for s in found if s]


def scrubbed(exc: BaseException, spec: str) -> str:
    """One line of a database error, without the store's password."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    for secret in _secrets(spec):
        text = text.replace(secret, "***")
    return text


class LabelStore:
    """The ``labels`` table of a SQLite file or a PostgreSQL database, opened at once (a bad path, a refused
    password or a table of another shape fail here, in one line). ``create=False`` reads an existing store
    only: a missing file is an error, never a new empty store. Safe for the threads of a web server."""

    def __init__(self, spec: str, *, create: bool = True) -> None:
        self.spec = spec
        self.location = shown(spec)
        self.postgres = is_postgres_url(spec)
        self._create = create
        self._lock = threading.Lock()
        self._conn: Any = None
        self._run(lambda conn: None)

    # ------------------------------------------------------------------------------- connecting

    def _connect(self) -> Any:
        conn: Any
        if self.postgres:
            import psycopg

            conn = psycopg.connect(self.spec, autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S)
        else:
            path = Path(self.spec.removeprefix("sqlite://"))
            if not self._create and not path.is_file():
                raise LabelStoreError(f"no label store at {self.location}: label answers with `faithfulness-pipeline "
                                      "review serve` or `review import` first")
            if self._create:
                path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, timeout=_BUSY_S, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_S * 1000)}")
            if self._create:
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
        try:
            self._check_table(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_table(self, conn: Any) -> None:
        """Creates the table if asked to and absent; refuses a ``labels`` table of another shape."""
        kind = 1 if self.postgres else 0
        if self._create:
            ddl = (f"CREATE TABLE IF NOT EXISTS {TABLE} ("
                   + ", ".join(f"{name} {types[kind]}" for name, types in COLUMNS.items())
                   + ", PRIMARY KEY (row_key, reviewer), CHECK (label_hallucinated IS NOT NULL OR "
                   "label_faithfulness IS NOT NULL))")
            if self.postgres:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                    conn.execute(ddl)
            else:
                conn.execute(ddl)
        if self.postgres:
            rows = conn.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s AND "
                                "table_schema = current_schema()", (TABLE,)).fetchall()
        else:
            rows = [(r[1],) for r in conn.execute(f"PRAGMA table_info({TABLE})").fetchall()]
        present = {str(r[0]) for r in rows}
        if not present:
            raise LabelStoreError(f"{self.location} holds no label store (no table {TABLE!r})")
        missing = [c for c in _NAMES if c not in present]
        if missing:
            raise LabelStoreError(f"{self.location} has a table {TABLE!r} without the column(s) {', '.join(missing)}: "
                                  "it is not a label store; give another database or file")

    def _run(self, work: Callable[[Any], T]) -> T:
        """``work(connection)`` under the store's lock; a database error drops the connection (the next call
        connects again) and becomes one :class:`LabelStoreError`."""
        errors: tuple[type[BaseException], ...] = (sqlite3.Error, OSError)
        if self.postgres:
            import psycopg

            errors = (*errors, psycopg.Error)
        with self._lock:
            try:
                if self._conn is None:
                    self._conn = self._connect()
                return work(self._conn)
            except errors as exc:
                self._drop()
                reason = scrubbed(exc, self.spec)
                if not self.postgres and isinstance(exc, sqlite3.OperationalError | OSError):
                    reason = open_failure(self.spec.removeprefix("sqlite://"), exc)
                raise LabelStoreError(f"label store {self.location}: {reason}") from None

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to close: it is gone either way
                self._conn.close()
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _sql(self, text: str) -> str:
        """``text`` with ``?`` placeholders in the store's own style."""
        return text.replace("?", "%s") if self.postgres else text

    # ------------------------------------------------------------------------------- writing

    def put(self, labels: Label | Sequence[Label]) -> int:
        """Writes ``labels`` in one transaction, each replacing its reviewer's earlier label of the answer;
        committed when this returns."""
        batch = [labels] if isinstance(labels, Label) else list(labels)
        for label in batch:
            _check(label)
        rows = [self._stored(label.values()) for label in batch]
        updates = ", ".join(f"{c} = excluded.{c}" for c in _NAMES[2:])
        statement = self._sql(f"INSERT INTO {TABLE} ({', '.join(_NAMES)}) VALUES ({', '.join('?' * len(_NAMES))}) "
                              f"ON CONFLICT (row_key, reviewer) DO UPDATE SET {updates}")

        def work(conn: Any) -> None:
            if self.postgres:
                with conn.transaction(), conn.cursor() as cursor:
                    cursor.executemany(statement, rows)
            else:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.executemany(statement, rows)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise

        if rows:
            self._run(work)
        return len(rows)

    def _stored(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        if self.postgres:
            return values
        # SQLite keeps time as ISO-8601 text (which sorts as time) and a bool as 0 / 1.
        out = list(values)
        out[2] = None if out[2] is None else int(out[2])
        out[5] = out[5].isoformat(timespec="microseconds")
        return tuple(out)

    def delete(self, row_key: str, reviewer: str) -> bool:
        """Deletes the reviewer's label of the answer; whether there was one."""
        statement = self._sql(f"DELETE FROM {TABLE} WHERE row_key = ? AND reviewer = ?")
        return bool(self._run(lambda conn: conn.execute(statement, (row_key, reviewer)).rowcount))

    # ------------------------------------------------------------------------------- reading

    def _select(self, where: str = "", params: tuple[Any, ...] = ()) -> list[Label]:
        statement = self._sql(f"SELECT {', '.join(_NAMES)} FROM {TABLE}{where} ORDER BY labelled_at, row_key, reviewer")
        rows = self._run(lambda conn: conn.execute(statement, params).fetchall())
        return [_label(row) for row in rows]

    def of_reviewer(self, reviewer: str) -> dict[str, Label]:
        """The reviewer's labels by row key (no one else's)."""
        return {label.row_key: label for label in self._select(" WHERE reviewer = ?", (reviewer,))}

    def labels(self, row_keys: Sequence[str] | None = None) -> list[Label]:
        """Every label (of the answers ``row_keys``, given), oldest first."""
        if row_keys is None:
            return self._select()
        keys = list(dict.fromkeys(row_keys))
        found = []
        for start in range(0, len(keys), _KEYS_PER_QUERY):
            chunk = tuple(keys[start:start + _KEYS_PER_QUERY])
            found += self._select(f" WHERE row_key IN ({', '.join('?' * len(chunk))})", chunk)
        return sorted(found, key=lambda label: (label.labelled_at, label.row_key, label.reviewer))

    def frame(self, row_keys: Sequence[str] | None = None) -> pl.DataFrame:
        """Every label (of the answers ``row_keys``, given) as a labels table (:data:`FRAME_SCHEMA`), as the
        corrected figures read one."""
        rows = [dict(zip(_NAMES, label.values(), strict=True)) for label in self.labels(row_keys)]
        return pl.DataFrame(rows, schema=FRAME_SCHEMA)

    def stamp(self) -> str:
        """A digest of every label's key and time: it changes with any label given, changed or taken back."""
        rows = self._run(lambda conn: conn.execute(
            f"SELECT row_key, reviewer, labelled_at FROM {TABLE} ORDER BY row_key, reviewer").fetchall())
        text = json.dumps([[str(v) for v in row] for row in rows], ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _label(row: Sequence[Any]) -> Label:
    values = dict(zip(_NAMES, row, strict=True))
    when = values["labelled_at"]
    if isinstance(when, str):
        when = datetime.fromisoformat(when)
    hallucinated = values["label_hallucinated"]
    return Label(
        row_key=values["row_key"], reviewer=values["reviewer"],
        label_hallucinated=None if hallucinated is None else bool(hallucinated),
        label_faithfulness=values["label_faithfulness"],
        claim_labels=tuple(json.loads(values["claim_labels"] or "[]")), labelled_at=when.astimezone(UTC),
        content_hash=values["content_hash"], scoring_run_id=values["scoring_run_id"],
        judge_model=values["judge_model"], prompt_version=values["prompt_version"],
        inclusion_probability=values["inclusion_probability"], source=values["source"],
    )


def _check(label: Label) -> None:
    """The store's rules, said before the database would refuse them less clearly."""
    if not label.row_key or not label.reviewer:
        raise LabelStoreError("a label needs a row key and a reviewer")
    if label.label_hallucinated is None and label.label_faithfulness is None:
        raise LabelStoreError(f"the label of {label.row_key!r} by {label.reviewer!r} has neither label_hallucinated "
                              "nor label_faithfulness")
    if label.label_faithfulness is not None and not 0 <= label.label_faithfulness <= 1:
        raise LabelStoreError(f"label_faithfulness must lie in [0, 1], got {label.label_faithfulness}")
    if label.source not in SOURCES:
        raise LabelStoreError(f"a label's source is one of {', '.join(SOURCES)}, not {label.source!r}")
    bad = [c for c in label.claim_labels if c.get("verdict") not in CLAIM_VERDICTS]
    if bad:
        raise LabelStoreError(f"a claim's verdict is one of {', '.join(CLAIM_VERDICTS)}; got {bad[0].get('verdict')!r}")


def faithfulness_of(claims: Iterable[dict[str, Any]]) -> float | None:
    """The share of the marked claims people judged supported; None when no claim was marked."""
    verdicts = [c["verdict"] for c in claims]
    return sum(v == "supported" for v in verdicts) / len(verdicts) if verdicts else None
