"""Running the review page: where it may listen, and uvicorn on a socket bound here (so that ``--port 0``'s
port is known, and said, before the first request).

The page shows people's conversations. On this machine's loopback address only this machine reaches it; on
any other address anyone who can reach the port could read them, so there it must be told a token, which
every request must then carry (``review.app.Guard``).
"""

from __future__ import annotations

import ipaddress
import signal
import socket
import threading
from collections.abc import Callable
from typing import Final

import uvicorn
from starlette.types import ASGIApp

from faithfulness_pipeline.core.errors import ConfigError

#: Shortest token a page on a network address takes: guessing it must be hopeless.
MIN_TOKEN: Final = 16
_GRACE_S: Final = 5


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine's own address (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_binding(host: str, token: str | None) -> None:
    """Refuses a network address without a token, and a token too short to keep anyone out."""
    if token is not None and len(token) < MIN_TOKEN:
        raise ConfigError(f"--token must be at least {MIN_TOKEN} characters (python3 -c 'import secrets; "
                          "print(secrets.token_urlsafe())' makes one)")
    if token is None and not is_loopback(host):
        raise ConfigError(f"--host {host} would show people's conversations to anyone who reaches this machine: give "
                          "--token TOKEN too (every request must then carry it), or keep the default 127.0.0.1")


def bound_socket(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (``port`` 0: a free one)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host.strip("[]"), port))
        listener.listen(128)
    except OSError as exc:
        listener.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return listener


def page_url(listener: socket.socket) -> str:
    host, port = listener.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/"


def serve(app: ASGIApp, listener: socket.socket, ready: Callable[[str], None] = lambda url: None) -> None:
    """Serves ``app`` on ``listener`` until SIGINT or SIGTERM, then returns (the requests in flight answered
    first); ``ready`` is told the page's address first. No access log: the first request of a page given its
    token carries it in the address."""
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", server_header=False,
                            timeout_graceful_shutdown=_GRACE_S)
    ready(page_url(listener))
    # uvicorn shuts down gracefully on these signals, then raises them again to the handlers it found: these,
    # which only take note, so that the command ends as a stopped server does (the store closed, exit 0)
    # rather than being killed by the signal it already handled.
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, lambda signum, frame: None) for sig in (signal.SIGINT, signal.SIGTERM)} \
        if main else {}
    try:
        uvicorn.Server(config).run(sockets=[listener])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
