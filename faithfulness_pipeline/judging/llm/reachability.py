"""Whether the judge's endpoint accepts connections, asked once before a run sends anything.

A closed port or an unknown host would otherwise be retried like a 500, pack after pack, for every row
(with back-off: minutes for a few thousand rows, days for millions), to end as error rows. One TCP connect
before the first row tells the user at once. It sends no request, costs nothing and is skipped where the
connection would go through a proxy (the proxy decides what is reachable) or the endpoint is not known.
"""

from __future__ import annotations

import socket
import urllib.request
from urllib.parse import urlsplit

from faithfulness_pipeline.core.errors import ConfigError

#: Longest wait for the connect: a host that drops packets must not hold the run for the request timeout.
CONNECT_TIMEOUT_S = 10.0


def shown(url: str) -> str:
    """``url`` without user and password, for messages."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return parts._replace(netloc=netloc).geturl()


def _proxied(scheme: str, host: str) -> bool:
    proxies = urllib.request.getproxies()
    return bool(proxies.get(scheme) or proxies.get("all")) and not urllib.request.proxy_bypass(host)


def check_reachable(api_base: str | None, timeout_s: float) -> None:
    """Raises :class:`ConfigError` naming ``api_base`` when no TCP connection to it can be made."""
    if not api_base:
        return
    parts = urlsplit(api_base)
    if parts.scheme not in ("http", "https") or not parts.hostname or _proxied(parts.scheme, parts.hostname):
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ConfigError(f"api_base {shown(api_base)!r} has an invalid port: fix --api-base / FP_JUDGE_API_BASE") \
            from None
    try:
        with socket.create_connection((parts.hostname, port), timeout=min(timeout_s, CONNECT_TIMEOUT_S)):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(
            f"cannot connect to the judge's endpoint {shown(api_base)} ({reason}); nothing was sent. Start the "
            f"server, or fix --api-base / FP_JUDGE_API_BASE (judge.api_base)"
        ) from None
