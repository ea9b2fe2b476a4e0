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
  ~900 at a time with one ``IN (...)`` query: a few hundred thousand lookups per second. What a warm
  re-run spends is hashing every row's passages again to find its key (one encode and one SHA-256
  update per row, the halves of a batch on two threads) and decoding the values (flat JSON arrays).
* **Nothing to install, one file to copy or delete.** ``sqlite3`` ships with Python.

What is stored: the key (a hash), the step, a compact JSON value (the claim texts or the verdicts, the
original usage, the truncation flag) and a timestamp. Never a prompt, never an API key: the key hash covers the
step, the prompt version, the model and api_base, the output-changing parameters and the item content,
and none of those contain the secret.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
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

    The content goes into the hash as one string: a header with the length (in code points) of every
    field, then the fields themselves, so no two different field sequences give the same bytes, and a
    row costs one ``encode`` and one ``update`` however many passages it has (a warm re-run hashes
    every row's passages again: this is its hot path). SHA-256 because CPUs hash it in hardware.
    """

    def __init__(self, *settings: str | None) -> None:
        self._base = hashlib.sha256(b"fp-result-v2")
        self._base.update(_content(settings))

    def key(self, *fields: str | None) -> bytes:
        h = self._base.copy()
        h.update(_content(fields))
        return h.digest()[:16]

    def key_of_lists(self, *groups: Sequence[str] | str | None) -> bytes:
        """A key over fields that are themselves sequences of strings (claims, passages)."""
        return self._digest(_list_content(groups))

    def keys_of_pairs(self, pairs: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[bytes]:
        """``key_of_lists(a, b)`` for every ``(a, b)``, hashed on two threads for a big batch.

        hashlib lets go of the GIL while it hashes more than 2 KiB, and passages are ~4 KiB a row:
        the two halves of a batch hash in parallel (a warm re-run does little else).
        """
        data = [_pair_content(a, b) for a, b in pairs]
        if len(data) < _PARALLEL_MIN:
            return self._digests(data)
        mid = len(data) // 2
        second = _pool().submit(self._digests, data[mid:])
        return self._digests(data[:mid]) + second.result()

    def _digest(self, data: bytes) -> bytes:
        h = self._base.copy()
        h.update(data)
        return h.digest()[:16]

    def _digests(self, data: Sequence[tuple[bytes, bytes]]) -> list[bytes]:
        out: list[bytes] = []
        for head, body in data:
            h = self._base.copy()
            h.update(head)
            h.update(body)
            out.append(h.digest()[:16])
        return out


_PARALLEL_MIN: Final = 512
_POOL: list[ThreadPoolExecutor] = []
# A forked child (a multiprocess executor) inherits the pool but not its thread: start afresh there.
os.register_at_fork(after_in_child=_POOL.clear)


def _pool() -> ThreadPoolExecutor:
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="fp-keys"))
    return _POOL[0]


def _pair_content(first: Sequence[str], second: Sequence[str]) -> tuple[bytes, bytes]:
    """``_list_content((first, second))`` as (header, body), without its generality: the verdict step's
    hot path, hashed in two updates so that the ~4 KiB body is never copied."""
    body = "\x00".join([*first, *second])
    if body.count("\x00") != max(len(first) + len(second) - 1, 0):
        whole = _list_content((first, second))
        return b"", whole
    try:
        data = body.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: the same bytes the slower error handler gives
        data = body.encode("utf-8", "surrogatepass")
    return f"l{len(first)},l{len(second)}\x01".encode(), data


def _list_content(groups: Sequence[Sequence[str] | str | None]) -> bytes:
    # Texts joined by NUL with the number of texts per group in the header: unambiguous as long as no
    # text holds a NUL, which one scan of the joined text checks; otherwise every length goes in.
    shape = ",".join(["n" if g is None else "s" if isinstance(g, str) else f"l{len(g)}" for g in groups])
    texts = [t for g in groups if g is not None for t in ((g,) if isinstance(g, str) else g)]
    body = "\x00".join(texts)
    if body.count("\x00") != max(len(texts) - 1, 0):
        shape = "L" + ",".join(str(len(t)) for t in texts) + ";" + shape
    return (shape + "\x01" + body).encode("utf-8", "surrogatepass")


def _content(fields: Sequence[str | None]) -> bytes:
    head = ",".join(["n" if f is None else str(len(f)) for f in fields])
    body = "".join([f for f in fields if f is not None])
    return (head + "\x00" + body).encode("utf-8", "surrogatepass")


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
#
# Values are flat JSON arrays (fewer objects to parse than nested ones: decoding is most of a warm
# re-run): claims ``[calls, prompt, completion, cost, claim, ...]``; verdicts ``[calls, prompt,
# completion, cost, truncated, letter, speculative, evidence, reason, letter, ...]``. The key prefix
# (``fp-result-v2``) changed with this layout, so values of the older layout are never looked up.

_DECODER: Final = json.JSONDecoder()
_VERDICT_FIELDS: Final = 4


def _dumps(value: list[Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _decode(value: str) -> list[Any]:
    data, _ = _DECODER.raw_decode(value)  # values are ours: no surrounding whitespace to skip
    if not isinstance(data, list):
        raise ValueError("not a stored result")
    return data


def encode_claims(claims: Sequence[str], usage: Usage) -> str:
    return _dumps([usage.llm_calls, usage.prompt_tokens, usage.completion_tokens, usage.cost_usd, *claims])


def decode_claims(value: str) -> tuple[tuple[str, ...], Usage]:
    data = _decode(value)
    return tuple(data[4:]), Usage(data[0], data[1], data[2], data[3])


def encode_verdicts(verdicts: Sequence[ClaimVerdict], usage: Usage, truncated: bool) -> str:
    flat: list[Any] = [usage.llm_calls, usage.prompt_tokens, usage.completion_tokens, usage.cost_usd, int(truncated)]
    for v in verdicts:
        flat += (_LETTER[v.verdict], int(v.speculative), v.evidence, v.reason)
    return _dumps(flat)


#: Verdicts without a reason repeat endlessly (``S0``, ``S1``...): one shared immutable object for each.
_PLAIN: dict[tuple[Any, ...], ClaimVerdict] = {}


def decode_verdicts(value: str) -> tuple[tuple[ClaimVerdict, ...], Usage, bool]:
    data = _decode(value)
    if (len(data) - 5) % _VERDICT_FIELDS:
        raise ValueError("not a stored verdict result")
    verdicts: list[ClaimVerdict] = []
    plain = _PLAIN
    for k in range(5, len(data), _VERDICT_FIELDS):
        letter, spec, evidence, reason = data[k : k + _VERDICT_FIELDS]
        if reason is None:
            shape = (letter, spec, evidence)
            verdict = plain.get(shape)
            if verdict is None:
                verdict = ClaimVerdict(_VERDICT[letter], bool(spec), None, evidence)
                if len(plain) < 4096:
                    plain[shape] = verdict
        else:
            verdict = ClaimVerdict(_VERDICT[letter], bool(spec), reason, evidence)
        verdicts.append(verdict)
    return tuple(verdicts), Usage(data[0], data[1], data[2], data[3]), bool(data[4])
