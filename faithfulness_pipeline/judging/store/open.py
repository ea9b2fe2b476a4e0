"""Opening the result store a setting names: a path or ``sqlite:///path`` (a SQLite file), or a
``postgresql://`` URL (a database several machines share)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.judging.store.protocol import Store, StoreError


def open_store(spec: Path | str) -> Store:
    """The result store ``spec`` names, opened now so that a bad one fails before any work."""
    from faithfulness_pipeline.judging.store.postgres import PostgresStore, is_postgres_url
    from faithfulness_pipeline.judging.store.sqlite import ResultStore

    text = str(spec)
    store: Store
    if is_postgres_url(text):
        store = PostgresStore(text)
    elif "://" in text and not text.startswith("sqlite://"):
        scheme = text.split("://", 1)[0]
        raise ConfigError(f"result store {text.split('@')[-1]!r}: unknown scheme {scheme!r}; use a file path, "
                          "sqlite:///path or postgresql://user@host/database")
    else:
        store = ResultStore(text.removeprefix("sqlite://") if text.startswith("sqlite://") else text)
    try:
        store.open()
    except (sqlite3.Error, OSError, ValueError) as exc:
        raise ConfigError(f"cannot use the result store {store.location}: {exc}") from None
    except StoreError as exc:
        raise ConfigError(str(exc)) from None
    return store
