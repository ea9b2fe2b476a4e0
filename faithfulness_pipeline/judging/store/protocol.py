"""What every result store backend is and shares: the protocol, the value type, the schema version and the
way keys are chunked into statements.

Backends: ``store.sqlite.ResultStore`` (a SQLite file, the default) and ``store.postgres.PostgresStore`` (one
database several machines share); ``store.open.open_store`` picks one from a path or URL.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Final, Protocol

SCHEMA_VERSION: Final = 1
#: Parameters per query: below SQLite's historical limit of 999 host parameters.
LOOKUP_CHUNK: Final = 900


def key_chunks(keys: Sequence[bytes]) -> Iterator[tuple[list[bytes], str]]:
    """``keys`` in pieces one SQLite statement takes as parameters, each with its ``?,?,...`` marks (the only
    text ever formatted into those statements)."""
    for start in range(0, len(keys), LOOKUP_CHUNK):
        chunk = list(keys[start : start + LOOKUP_CHUNK])
        yield chunk, ",".join("?" * len(chunk))

#: A stored value: a step result is JSON text; a whole row (``store.rows``) is UTF-8 bytes, which
#: reach a polars column without a detour through Python strings (a third faster to read).
Value = str | bytes


class StoreError(Exception):
    """A store that cannot be reached or read (a database that is down, refuses the password, or holds a
    store of another version); the message is one line, with any password masked."""


class Store(Protocol):
    """What a result store does, whatever holds it (``ResultStore``: SQLite; ``PostgresStore``: PostgreSQL)."""

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

