"""Phoenix's REST API as data or a one-line error: the one place a reply of Phoenix is read.

A remote may misbehave in many ways, and each must end in one sentence naming the endpoint (never its
credentials), not in a traceback or a run that never ends:

- every call has a whole-request deadline: the time left is checked on every piece of a reply received, so a
  body trickled a byte at a time cannot hold a run past it (a wait for one piece is bounded by the time left);
  the status line and headers, which httpx reads with no hook between pieces, are bounded by a timer that
  shuts the request's connection at the deadline (each request has a connection of its own, so the timer has
  its socket and stops nothing else);
- redirects are followed on the same origin only (scheme, host and port), a few at most: another origin
  might be another service, and the credentials are for this one;
- a reply is data only when it is a 2xx ``application/json`` object; anything else (an error status, a proxy's
  HTML page, a 204, a body that is no JSON or a list) is an :class:`InputError` quoting the body's start with
  every credential scrubbed (a proxy may echo the ``Authorization`` header);
- cursor paging stops when a cursor comes back (the same page forever) or past :data:`MAX_PAGES`."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from types import TracebackType
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import httpx

from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.traces.urls import http_base, scrubbed, shown

#: Same-origin redirects followed in one call.
MAX_REDIRECTS: Final = 5
#: Pages one listing may have (a hundred million spans, at 1000 a page): past it, the paging is taken to be
#: broken rather than the project that large.
MAX_PAGES: Final = 100_000
#: Characters of an error body a message quotes.
_QUOTED: Final = 200


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port


def json_kind(value: Any) -> str:
    """How a message names a JSON value's type."""
    return {dict: "an object", list: "a list", str: "text", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


class _Deadline:
    """A timer that shuts a request's socket when its deadline passes: a reply trickled into its headers is
    read by httpx with only a per-read timeout. The socket comes from httpcore's trace of the connection."""

    def __init__(self, seconds: float) -> None:
        self.fired = False
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.complete" and info.get("return_value") is not None:
            found = info["return_value"].get_extra_info("socket")
            with self._lock:
                self._socket = found if isinstance(found, socket.socket) else None
                if self.fired:
                    self._shut()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            self._shut()

    def _shut(self) -> None:
        if self._socket is not None:
            with suppress(OSError):  # closed already: nothing left to stop
                self._socket.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()


class PhoenixHttp:
    """Calls to one Phoenix: ``endpoint`` (credentials in its user info become Basic auth, an ``api_key`` a
    Bearer header), each bounded by ``timeout_s`` whole."""

    def __init__(self, endpoint: str, api_key: str | None = None, timeout_s: float = 30.0) -> None:
        base = http_base(endpoint, "Phoenix endpoint", "http://127.0.0.1:6006")
        #: what messages name: no user info or query (credentials go there)
        self.endpoint = shown(base)
        self.timeout_s = timeout_s
        parts = urlsplit(base)
        password = unquote(parts.password) if parts.password else None
        user = unquote(parts.username) if parts.username else None
        #: what a reply's text must never show
        self.secrets = [s for s in (api_key, password, f"{user}:{password}" if user and password else None) if s]
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        # follow_redirects=False: _request follows the same origin's only. No kept-alive connection: each
        # request connects anew, so its deadline's timer knows the socket it may shut (_Deadline).
        self._http = httpx.Client(base_url=base, headers=headers, follow_redirects=False,
                                  limits=httpx.Limits(max_keepalive_connections=0))
        self._origin = _origin(httpx.URL(base))

    def __enter__(self) -> PhoenixHttp:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def error(self, text: str) -> InputError:
        """An error about this Phoenix, its text scrubbed of every credential."""
        return InputError(scrubbed(f"Phoenix at {self.endpoint} {text}", self.secrets))

    def call(self, method: str, path: str, *, params: dict[str, Any] | None = None,
             json: Any = None) -> dict[str, Any]:
        """The JSON object Phoenix answers ``method path`` with, or an :class:`InputError` in one line."""
        deadline = time.monotonic() + self.timeout_s
        url: str = path
        for _ in range(MAX_REDIRECTS + 1):
            status, content_type, body, location = self._request(method, url, params, json, deadline, path)
            if location is None:
                return self._data(method, path, status, content_type, body)
            target = httpx.URL(location)
            if _origin(target) != self._origin:
                raise self.error(f"redirected {method} {path} (HTTP {status}) to {shown(str(target))}, another "
                                 "origin, which is not followed: name that Phoenix as the endpoint")
            url, params = str(target), None  # the target's own query replaces ours
        raise self.error(f"redirected {method} {path} more than {MAX_REDIRECTS} times")

    def _request(self, method: str, url: str, params: dict[str, Any] | None, json: Any, deadline: float,
                 path: str) -> tuple[int, str, bytes, str | None]:
        """(status, content type, body, redirect location) of one request, read whole before ``deadline``."""
        left = deadline - time.monotonic()
        timer = _Deadline(left)
        try:
            if left <= 0:
                raise httpx.ReadTimeout("deadline")
            with self._http.stream(method, url, params=params, json=json, timeout=httpx.Timeout(left),
                                   extensions={"trace": timer.trace}) as reply:
                if reply.is_redirect and reply.headers.get("location"):
                    # absolute: a relative Location is of the URL asked, which base_url's prefix is part of
                    return reply.status_code, "", b"", str(reply.url.join(reply.headers["location"]))
                pieces = []
                for piece in reply.iter_bytes():
                    pieces.append(piece)
                    if time.monotonic() > deadline:  # a trickled reply: the deadline is the whole call's
                        raise httpx.ReadTimeout("deadline")
                return reply.status_code, reply.headers.get("content-type", ""), b"".join(pieces), None
        except httpx.TimeoutException:
            raise self.error(f"did not answer {method} {path} within {self.timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            if timer.fired:  # the connection was shut by the deadline, not by the server
                raise self.error(f"did not answer {method} {path} within {self.timeout_s:g} s") from None
            raise self.error(f"did not answer {method} {path}: {type(exc).__name__}") from None
        finally:
            timer.cancel()

    def _data(self, method: str, path: str, status: int, content_type: str, body: bytes) -> dict[str, Any]:
        text = body.decode("utf-8", "replace")
        quoted = " ".join(text[:_QUOTED].split())
        if status == 404 and "/projects/" in path:
            raise self.error(f"has no such project ({path}): name one of its projects")
        if status >= 300 or status < 200:
            raise self.error(f"refused {method} {path}: HTTP {status} {quoted}".rstrip())
        if not body:
            raise self.error(f"answered {method} {path} with HTTP {status} and no body, where Phoenix's API "
                             "answers JSON: is this Phoenix?")
        if "json" not in content_type.lower():
            raise self.error(f"answered {method} {path} with {content_type or 'no content type'}, not JSON "
                             f"(a proxy's or login page?): {quoted}")
        try:
            data = httpx.Response(status, content=body).json()
        except ValueError:
            raise self.error(f"answered {method} {path} with a body that is not JSON: {quoted}") from None
        if not isinstance(data, dict):
            raise self.error(f"answered {method} {path} with {json_kind(data)}, not a JSON object")
        return data

    def pages(self, path: str, params: dict[str, Any]) -> Iterator[list[dict[str, Any]]]:
        """The ``data`` of every page of a cursor-paged listing, each a list of objects."""
        params = dict(params)
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            body = self.call("GET", path, params=params)
            data, cursor = body.get("data"), body.get("next_cursor")
            if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
                raise self.error(f"answered GET {path} with a page whose data is {json_kind(data)}, not a list of "
                                 "objects")
            yield data
            if not cursor:
                return
            if not isinstance(cursor, str):
                raise self.error(f"answered GET {path} with a next_cursor that is {json_kind(cursor)}, not text")
            if cursor in seen:
                raise self.error(f"gave the cursor {cursor[:40]!r} of GET {path} twice: its paging does not "
                                 f"advance; stopped after {len(seen) + 1} pages")
            seen.add(cursor)
            params["cursor"] = cursor
        raise self.error(f"had more than {MAX_PAGES} pages of GET {path}: stopped")
