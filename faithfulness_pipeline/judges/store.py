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
  timeout instead of failing. Two scoring runs (two Dagster partitions) can share one store file.
* **Fast warm re-runs.** Keys are 16-byte blobs in a ``WITHOUT ROWID`` primary-key table, looked up
  ~900 at a time with one ``IN (...)`` query: several hundred thousand lookups per second, enough
  for the warm re-run target of 50,000 answers/s with the rest of the pipeline on top.
* **Nothing to install, one file to copy or delete.** ``sqlite3`` ships with Python.

What is stored: the key (a hash), the step, a compact JSON value (claims or verdict codes, the original
usage, the truncation flag) and a timestamp. Never a prompt, never an API key: the key hash covers the
step, the prompt version, the model and api_base, the output-changing parameters and the item content,
and none of those contain the secret.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import struct
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from faithfulness_pipeline.core.judge import ClaimVerdict, Usage, Verdict

SCHEMA_VERSION: Final = 1
#: Parameters per query: below SQLite's historical limit of 999 host parameters.
LOOKUP_CHUNK: Final = 900

_LETTER: Final[dict[str, str]] = {"supported": "S", "contradicted": "C", "unsupported": "U"}
_VERDICT: Final[dict[str, Verdict]] = {"S": "supported", "C": "contradicted", "U": "unsupported"}


class KeyMaker:
    """Result keys: SHA-256 over fixed settings, then over one item's content fields, cut to 16 bytes.

    Every field is length-prefixed, so no two different field sequences can hash the same bytes.
    SHA-256 because CPUs hash it in hardware: a warm re-run hashes every row's passages again.
    """

    def __init__(self, *settings: str | None) -> None:
        self._base = hashlib.sha256(b"fp-result-v1")
        for s in settings:
            _feed(self._base, s)

    def key(self, *fields: str | None) -> bytes:
        h = self._base.copy()
        for f in fields:
            _feed(h, f)
        return h.digest()[:16]

    def key_of_lists(self, *groups: Sequence[str] | str | None) -> bytes:
        """A key over fields that are themselves sequences of strings (claims, passages)."""
        h = self._base.copy()
        for g in groups:
            if g is None or isinstance(g, str):
                _feed(h, g)
                continue
            # Bytes 0xFE and 0xFF never occur in UTF-8, so they delimit without lengths: one update
            # per list (warm re-runs hash every row's passages again, so this is a hot path).
            data = b"\xff".join([s.encode("utf-8", "surrogatepass") for s in g])
            h.update(b"L%d\xfe%b\xfe" % (len(g), data))
        return h.digest()[:16]


def _feed(h: Any, value: str | None) -> None:
    if value is None:
        h.update(b"N")
        return
    data = value.encode("utf-8", "surrogatepass")
    h.update(struct.pack("<cq", b"S", len(data)))
    h.update(data)


class ResultStore:
    """A SQLite file of results keyed by :class:`KeyMaker` keys. Safe for two processes at once."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def open(self) -> None:
        """Opens (creating if needed) the store now, so that a bad path fails before any work."""
        with self._lock:
            self._connection()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 60000")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS results ("
                " key BLOB PRIMARY KEY, step TEXT NOT NULL, value TEXT NOT NULL, created_at REAL NOT NULL"
                ") WITHOUT ROWID"
            )
            conn.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
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

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, str]:
        """The stored values of those keys that are present (one query per ~900 keys)."""
        found: dict[bytes, str] = {}
        if not keys:
            return found
        with self._lock:
            conn = self._connection()
            for start in range(0, len(keys), LOOKUP_CHUNK):
                chunk = keys[start : start + LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                query = f"SELECT key, value FROM results WHERE key IN ({marks})"  # only ? placeholders are formatted in
                found.update(conn.execute(query, chunk).fetchall())
        return found

    def put_many(self, rows: Iterable[tuple[bytes, str, str]]) -> None:
        """Stores ``(key, step, value)`` rows in one transaction, replacing older values of the keys."""
        now = time.time()
        batch = [(k, step, value, now) for k, step, value in rows]
        if not batch:
            return
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT OR REPLACE INTO results (key, step, value, created_at) VALUES (?, ?, ?, ?)", batch
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def count(self) -> int:
        with self._lock:
            row = self._connection().execute("SELECT count(*) FROM results").fetchone()
        return int(row[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


# ------------------------------------------------------------------------------------- value codecs


def _usage_list(u: Usage) -> list[Any]:
    return [u.llm_calls, u.prompt_tokens, u.completion_tokens, u.cost_usd]


def _usage(raw: Sequence[Any]) -> Usage:
    calls, prompt, completion, cost = raw  # written by _usage_list: already float, int, int, float|None
    return Usage(calls, prompt, completion, cost)


def encode_claims(claims: Sequence[str], usage: Usage) -> str:
    return json.dumps({"c": list(claims), "u": _usage_list(usage)}, ensure_ascii=False, separators=(",", ":"))


def decode_claims(value: str) -> tuple[tuple[str, ...], Usage]:
    data = json.loads(value)
    return tuple(data["c"]), _usage(data["u"])


def encode_verdicts(verdicts: Sequence[ClaimVerdict], usage: Usage, truncated: bool) -> str:
    rows = [[_LETTER[v.verdict], int(v.speculative), v.evidence, v.reason] for v in verdicts]
    payload = {"v": rows, "t": int(truncated), "u": _usage_list(usage)}
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


#: Verdicts without a reason repeat endlessly (``S0``, ``S1``...): one shared immutable object for each.
_PLAIN: dict[tuple[Any, ...], ClaimVerdict] = {}


def _verdict(row: list[Any]) -> ClaimVerdict:
    letter, spec, evidence, reason = row
    verdict = ClaimVerdict(verdict=_VERDICT[letter], speculative=bool(spec), reason=reason, evidence=evidence)
    if reason is None and len(_PLAIN) < 4096:
        _PLAIN[tuple(row)] = verdict
    return verdict


def decode_verdicts(value: str) -> tuple[tuple[ClaimVerdict, ...], Usage, bool]:
    data = json.loads(value)
    # The warm re-run path: one dict probe per plain verdict, no object built.
    verdicts = tuple([_PLAIN.get(tuple(row)) or _verdict(row) for row in data["v"]])
    return verdicts, _usage(data["u"]), bool(data["t"])
