"""A URL as a message may show it: credentials users put in one (``http://user:secret@phoenix:6006``) and its
query stay out of logs, summaries, exceptions and Dagster metadata.

:func:`scrubbed` is the one scrubber for any text that may carry a URL or a remote's reply (an error body may
echo the request's ``Authorization`` header): every URL in it loses its user info and its secret query values,
``Bearer``/``Basic`` credentials are masked, and so are the secrets given (an API key) and those of the
environment (``tables.storage.scrub``)."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.tables.storage import scrub

#: ``scheme://user:password@`` (any scheme: ``phoenix+http``, ``ftp``, ...): the user info goes.
_USER_INFO: Final = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s?#'\"]*@")  # to the last @: a@b in a password
#: A query value whose name says it is a credential (``?api_key=``, ``&token=``, ``password=``, ...).
_SECRET_QUERY: Final = re.compile(r"([?&;](?:[\w.-]*(?:key|token|secret|password|passwd|pwd|auth|sig|signature|"
                                  r"credential)[\w.-]*)=)[^&#\s'\"]*", re.IGNORECASE)
#: ``Authorization: Bearer X`` / ``Basic X`` as a proxy's echo of a request may show it.
_CREDENTIAL: Final = re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE)


def shown(url: str) -> str:
    """``url`` without user info and query: scheme, host, port and path."""
    parts = urlsplit(url)
    port = f":{parts.port}" if _port(url) else ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"


def _port(url: str) -> int | None:
    try:
        return urlsplit(url).port
    except ValueError:  # a port that is no number: shown without it, never a traceback
        return None


def scrubbed(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with no credential a URL, a header's echo, ``secrets`` or the environment may put in it."""
    for secret in secrets:
        if secret and len(secret) >= 4:  # a one-letter value would blank out every such letter of the text
            text = text.replace(secret, "***")
            # a Basic header carries "user:password" in base64: its echo is masked whole by _CREDENTIAL,
            # and a body that decoded it is masked here
            text = text.replace(base64.b64encode(secret.encode()).decode(), "***")
    text = _USER_INFO.sub(r"\1***@", text)
    text = _SECRET_QUERY.sub(r"\1***", text)
    text = _CREDENTIAL.sub(r"\1 ***", text)
    return scrub(text)


def http_base(url: str, what: str, example: str) -> str:
    """``url`` without its trailing slash, or a :class:`ConfigError` naming ``what`` and an ``example`` when it
    is no http(s) URL with a host."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or not parts.hostname:
        raise ConfigError(f"the {what} must be an http(s) URL such as {example}, got {shown(url)!r}")
    try:
        parts.port  # noqa: B018 -- urlsplit checks the port only when it is asked for
    except ValueError:
        raise ConfigError(f"the {what} has no valid port: {shown(url)!r}; such as {example}") from None
    return url.rstrip("/")
