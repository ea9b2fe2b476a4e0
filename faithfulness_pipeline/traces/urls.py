"""A URL as a message may show it: credentials users put in one (``http://user:secret@phoenix:6006``) and its
query stay out of logs, summaries and exceptions."""

from __future__ import annotations

from urllib.parse import urlsplit


def shown(url: str) -> str:
    """``url`` without user info and query: scheme, host, port and path."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"
