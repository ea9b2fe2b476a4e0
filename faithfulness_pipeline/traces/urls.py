"""A URL as a message may show it: credentials users put in one (``http://user:secret@phoenix:6006``) and its
query stay out of logs, summaries and exceptions."""

from __future__ import annotations

from urllib.parse import urlsplit

from faithfulness_pipeline.core.errors import ConfigError


def shown(url: str) -> str:
    """``url`` without user info and query: scheme, host, port and path."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"


def http_base(url: str, what: str, example: str) -> str:
    """``url`` without its trailing slash, or a :class:`ConfigError` naming ``what`` and an ``example`` when it
    is no http(s) URL with a host."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"the {what} must be an http(s) URL such as {example}, got {shown(url)!r}")
    return url.rstrip("/")
