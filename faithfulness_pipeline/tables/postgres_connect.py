"""Connecting to the PostgreSQL database of the ``postgres`` table format (``tables.postgres_tables``), and its
URL as messages may show it: never the password.

The URL is libpq's (``postgresql://user:password@host:5432/db``; a Unix socket folder goes in ``?host=``).
A connection that fails is one line naming ``FP_POSTGRES_URL`` with the database's reason, scrubbed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qs, urlsplit

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.tables.storage import scrub

if TYPE_CHECKING:
    import psycopg

#: The setting, as errors name it.
SETTING: Final = "FP_POSTGRES_URL / warehouse.postgres_url"
CONNECT_TIMEOUT_S: Final = 10


def is_postgres_url(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def shown(url: str) -> str:
    """``url`` as it may be shown: scheme, host, port and database (a socket folder as ``?host=``); no user, no
    password, no other query value."""
    parts = urlsplit(url)
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    socket = parse_qs(parts.query).get("host", [])
    where = f"?host={socket[0]}" if socket and not parts.hostname else ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}{where}"


def secrets(url: str) -> list[str]:
    """The password(s) in ``url`` (``user:password@``, ``?password=``), to scrub out of messages."""
    parts = urlsplit(url)
    found = [parts.password or "", *parse_qs(parts.query).get("password", [])]
    return [s for s in found if s]


def one_line(exc: BaseException, url: str) -> str:
    """A database error as one line without the URL's password."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    for secret in secrets(url):
        text = text.replace(secret, "***")
    return scrub(text)[:300]


def checked_url(url: str | None) -> str:
    """``url``, or one line naming the setting when it is absent or no PostgreSQL URL."""
    if not url or not url.strip():
        raise ConfigError(f"{SETTING} is not set: the postgres table format needs a database, e.g. "
                          "postgresql://user:password@host:5432/db (docs/table-formats.md)")
    if not is_postgres_url(url.strip()):
        raise ConfigError(f"{SETTING} must be a postgresql:// URL (postgresql://user:password@host:5432/db, or "
                          f"postgresql://user:password@/db?host=/socket/folder), got {shown(url)!r}")
    return url.strip()


def connect(url: str) -> psycopg.Connection[Any]:
    """A connection (not in autocommit: each caller commits its own transactions) whose session time zone is
    UTC, so instants read back the same whatever the server's default; an unreachable database or a refused
    password is one line naming the setting."""
    import psycopg

    try:
        conn = psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as exc:
        raise ConfigError(f"{SETTING} {shown(url)} cannot be reached: {one_line(exc, url)}: check the host, "
                          "database, user and password") from None
    conn.execute("SET TIME ZONE 'UTC'")
    conn.commit()
    return conn
