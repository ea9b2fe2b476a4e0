"""A remote that misbehaves, for tests: an HTTP server on 127.0.0.1 in a thread whose every reply is what a
test's function makes of the request (any status, headers and body, optionally trickled a piece at a time).
It keeps the requests it got, so a test can count them."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Asked:
    method: str
    path: str
    query: dict[str, list[str]]
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str | None = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    #: seconds between the body's bytes (0: all at once)
    trickle_s: float = 0.0
    #: the status line and headers trickled too, at ``trickle_s`` a byte (they are read before any body)
    trickle_head: bool = False


def json_reply(data: Any, status: int = 200) -> Reply:
    return Reply(status, json.dumps(data).encode())


@dataclass
class FaultServer:
    answer: Callable[[Asked], Reply]
    asked: list[Asked] = field(default_factory=list)

    def __enter__(self) -> FaultServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                parts = urlsplit(self.path)
                asked = Asked(self.command, parts.path, parse_qs(parts.query), body, dict(self.headers))
                server.asked.append(asked)
                reply = server.answer(asked)
                if reply.trickle_head:
                    self._trickled_head(reply)
                    return
                self.send_response(reply.status)
                if reply.content_type:
                    self.send_header("Content-Type", reply.content_type)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                if reply.status != 204:
                    self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                try:
                    if not reply.trickle_s:
                        self.wfile.write(reply.body)
                        return
                    for byte in reply.body:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(reply.trickle_s)
                except OSError:
                    return  # the client gave up: what a trickle is for

            def _trickled_head(self, reply: Reply) -> None:
                head = (f"HTTP/1.1 {reply.status} OK\r\nContent-Type: {reply.content_type}\r\n"
                        f"Content-Length: {len(reply.body)}\r\n\r\n").encode()
                try:
                    for byte in head + reply.body:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(reply.trickle_s)
                except OSError:
                    return  # the client gave up: what a trickle is for

            do_GET = do_POST = do_PUT = _any

            def log_message(self, *_: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()
