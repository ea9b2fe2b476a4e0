"""Opening the result store a setting names: a path or ``sqlite:///path`` (a SQLite file), or a
``postgresql://`` URL (a database several machines share)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Final

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.judging.store.protocol import Store, StoreError
from faithfulness_pipeline.tables.sqlite_files import open_failure

#: A libpq ``key=value`` pair (``host=db dbname=fp``): no file path a user means starts a word that way.
LIBPQ_PAIR: Final = re.compile(r"(?:^|\s)(?:host|hostaddr|dbname|user|password|port|sslmode|service)\s*=")


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
    elif LIBPQ_PAIR.search(text):
        # A libpq key=value DSN would otherwise be a SQLite file named after it, password included.
        raise ConfigError("the result store looks like a libpq key=value connection string (host=... dbname=...): "
                          "give it as a URL, postgresql://user@host:5432/database (the password in PGPASSWORD or "
                          "~/.pgpass), or a SQLite file path")
    else:
        store = ResultStore(text.removeprefix("sqlite://") if text.startswith("sqlite://") else text)
    try:
        store.open()
    except (sqlite3.Error, OSError) as exc:
        reason = exc if isinstance(store, PostgresStore) else open_failure(store.location, exc)
        raise ConfigError(f"cannot use the result store {store.location}: {reason}") from None
    except ValueError as exc:
        raise ConfigError(f"cannot use the result store {store.location}: {exc}") from None
    except StoreError as exc:
        raise ConfigError(str(exc)) from None
    return store
