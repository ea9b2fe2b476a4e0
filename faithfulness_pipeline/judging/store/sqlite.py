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
  ~900 at a time with one ``IN (...)`` query (each distinct key once): a few hundred thousand lookups
  per second. Finished rows are kept whole (``row_results``): a warm re-run hashes every row's
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

import hashlib
import itertools
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

import polars as pl
import pyarrow as pa

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.port import ClaimVerdict, Usage, Verdict

SCHEMA_VERSION: Final = 1
T = TypeVar("T")
#: Parameters per query: below SQLite's historical limit of 999 host parameters.
LOOKUP_CHUNK: Final = 900


def key_chunks(keys: Sequence[bytes]) -> Iterator[tuple[list[bytes], str]]:
    """``keys`` in pieces one SQLite statement takes as parameters, each with its ``?,?,...`` marks (the only
    text ever formatted into those statements)."""
    for start in range(0, len(keys), LOOKUP_CHUNK):
        chunk = list(keys[start : start + LOOKUP_CHUNK])
        yield chunk, ",".join("?" * len(chunk))

#: How verdicts are stored: one letter each.
LETTER_OF_VERDICT: Final[dict[str, str]] = {"supported": "S", "contradicted": "C", "unsupported": "U"}
VERDICT_OF_LETTER: Final[dict[str, Verdict]] = {"S": "supported", "C": "contradicted", "U": "unsupported"}


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
        """``key_of_lists(a, b)`` for every ``(a, b)``, on this thread: splitting a call's batch (512
        items) over two threads was slower (0.055 vs 0.046 s per 5,000 items), as for the columns."""
        return self._digests([_pair_content(a, b) for a, b in pairs])

    def keys_of_spans(self, first: _Spans, second: _Spans | None = None) -> list[bytes]:
        """One key per row over the row's bytes in ``first`` then (if given) its bytes in ``second``."""
        data, rows = first
        base = self._base
        out: list[bytes] = []
        if second is None:
            for a, b in rows:
                h = base.copy()
                h.update(data[a:b])
                out.append(h.digest()[:16])
            return out
        tail_data, tail_spans = second
        piece = _GIL_PIECE
        for (a, b), (c, d) in zip(rows, tail_spans, strict=True):
            h = base.copy()
            h.update(data[a:b])
            while d - c > piece:
                h.update(tail_data[c : c + piece])
                c += piece
            h.update(tail_data[c:d])
            out.append(h.digest()[:16])
        return out

    def _digest(self, data: bytes) -> bytes:
        return self._digests([(b"", data)])[0]

    def _digests(self, data: Sequence[tuple[bytes, bytes]]) -> list[bytes]:
        # Pieces under _GIL_PIECE: these keys are made on the event loop (per-item calls), which must not
        # give the GIL away to the token-counting thread and wait up to a switch interval to get it back.
        piece = _GIL_PIECE
        out: list[bytes] = []
        view = memoryview
        for head, body in data:
            h = self._base.copy()
            h.update(head)
            if len(body) <= piece:
                h.update(body)
            else:
                whole = view(body)
                for start in range(0, len(body), piece):
                    h.update(whole[start : start + piece])
            out.append(h.digest()[:16])
        return out


#: hashlib lets go of the GIL while it hashes 2 KiB or more, and every time it does, taking the GIL back
#: waits on whichever thread has it: with other threads busy, that costs more than the hashing itself.
_GIL_PIECE: Final = 2047


# Lookups read pages through a memory map instead of one read() call per page, and keep up to 64 MiB
# of pages in SQLite's own cache: a warm re-run probes every key of a chunk.
_MMAP_BYTES: Final = 1 << 30
_CACHE_KIB: Final = 64 * 1024
#: A string column's UTF-8 buffer and each row's (start, end) in it.
_Spans = tuple[memoryview, list[tuple[int, int]]]


def spans(texts: pl.Series) -> _Spans:
    """The UTF-8 buffer of a string column and each row's (start, end) in it."""
    arr = texts.rechunk().to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.type != pa.large_string():
        arr = arr.cast(pa.large_string())
    if arr.null_count:
        raise ValueError("content to hash must not be null")
    _, offsets_buf, data_buf = arr.buffers()
    offsets = memoryview(offsets_buf).cast("q")[arr.offset : arr.offset + len(arr) + 1].tolist()
    data = memoryview(data_buf) if data_buf is not None else memoryview(b"")
    return data, list(itertools.pairwise(offsets))


def list_spans(lists: pl.Series) -> _Spans:
    """The UTF-8 buffer of a list-of-strings column and, for each row, the (start, end) of all its
    strings, which Arrow lays out back to back: no joined copy of a row's texts. No null row or text."""
    arr = lists.rechunk().to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    arr = arr.cast(pa.large_list(pa.large_string()))
    if arr.null_count or arr.values.null_count:
        raise ValueError("content to hash must not be null")
    texts = arr.values
    if len(texts) == 0:
        return memoryview(b""), [(0, 0)] * len(arr)
    _, offsets_buf, data_buf = texts.buffers()
    starts = memoryview(offsets_buf).cast("q")[texts.offset : texts.offset + len(texts) + 1]
    rows = memoryview(arr.buffers()[1]).cast("q")[arr.offset : arr.offset + len(arr) + 1].tolist()
    data = memoryview(data_buf) if data_buf is not None else memoryview(b"")
    return data, [(starts[i], starts[j]) for i, j in itertools.pairwise(rows)]


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


#: A stored value: a step result is JSON text; a whole row (``row_results``) is UTF-8 bytes, which
#: reach a polars column without a detour through Python strings (a third faster to read).
Value = str | bytes


class StoreError(Exception):
    """A store that cannot be reached or read (a database that is down, refuses the password, or holds a
    store of another version); the message is one line, with any password masked."""


class Store(Protocol):
    """What a result store does, whatever holds it (``ResultStore``: SQLite; ``store_postgres``)."""

    #: where the store is, as it may be shown (never with a password)
    location: str

    def open(self) -> None: ...

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, Value]: ...

    def get_aligned(self, keys: Sequence[bytes]) -> list[Value | None]: ...

    def put_many(self, rows: Iterable[tuple[bytes, str, Value]]) -> None: ...

    def claim(self, keys: Sequence[bytes], owner: str, ttl_s: float, takeover: Sequence[str] = ()) -> set[bytes]:
        """Those of ``keys`` now leased to ``owner``: free, expired, already its own (renewed) or held by one
        of the ``takeover`` owners (known to be dead)."""
        ...

    def lease_owners(self, keys: Sequence[bytes]) -> set[str]:
        """Who holds leases on any of ``keys``."""
        ...

    def release(self, keys: Sequence[bytes], owner: str) -> None: ...

    def count(self) -> int: ...

    def close(self) -> None: ...


class ResultStore:
    """A SQLite file of results keyed by :class:`KeyMaker` keys. Safe for two processes at once."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.location = str(self.path)
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

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, Value]:
        """The stored values of those keys that are present (one query per ~900 keys)."""
        found: dict[bytes, Value] = {}
        if not keys:
            return found
        with self._lock:
            conn = self._connection()
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
            try:
                conn.executemany(
                    "INSERT OR REPLACE INTO results (key, step, value, created_at) VALUES (?, ?, ?, ?)", batch
                )
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
        flat += (LETTER_OF_VERDICT[v.verdict], int(v.speculative), v.evidence, v.reason)
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
                verdict = ClaimVerdict(VERDICT_OF_LETTER[letter], bool(spec), None, evidence)
                if len(plain) < 4096:
                    plain[shape] = verdict
        else:
            verdict = ClaimVerdict(VERDICT_OF_LETTER[letter], bool(spec), reason, evidence)
        verdicts.append(verdict)
    return tuple(verdicts), Usage(data[0], data[1], data[2], data[3]), bool(data[4])


# ------------------------------------------------------------------------------ column-wise decoding


def usage_exprs(data: pl.Expr) -> list[pl.Expr]:
    """The usage columns from a stored list of usage numbers (as text): calls, prompt and completion
    tokens, cost; null where a number is missing or unreadable."""
    return [data.list.get(n, null_on_oob=True).cast(dtype, strict=False).alias(name)
            for n, (name, dtype) in enumerate(S.USAGE_SCHEMA.items())]
