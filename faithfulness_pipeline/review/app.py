"""The review page: a starlette app over a :class:`ReviewSession`, one server-rendered page and a few JSON
endpoints.

- ``GET /``: the page (``?reviewer=NAME`` names the reviewer once, kept in a cookie; ``?token=`` likewise
  gives the token); without a name, a form asking for it;
- ``GET /api/next?after=I``: the reviewer's next answer to label (from the start, ``after`` omitted), or
  ``{"done": true}``;
- ``GET /api/item?index=I``: answer ``I`` of the queue as the reviewer may see it now;
- ``POST /api/label``: ``{"index", "hallucinated", "claims": [{"claim_index", "verdict"}]}``, written to the
  store before the answer, which is the answer's view with the judge's result;
- ``POST /api/undo``: takes back the reviewer's latest label; the answer's view, blind again;
- ``GET /api/progress``: labelled of total, and the agreement with the other reviewers.

Every request passes :class:`Guard` first: with a token, none goes without it (403, plain); without one,
only requests naming this machine as their host (a web page elsewhere cannot reach the server through a name
of its own that resolves here: DNS rebinding). A write must be JSON from the page's own origin (a form or a
script of another site cannot post one). An error is one plain line, never a traceback; the server's log
line names what failed, scrubbed of the store's password.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, Final
from urllib.parse import quote, unquote, urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from faithfulness_pipeline.review.session import ReviewError, ReviewSession, checked_reviewer
from faithfulness_pipeline.review.store import LabelStoreError, scrubbed

log = logging.getLogger(__name__)

REVIEWER_COOKIE: Final = "fp_reviewer"
TOKEN_COOKIE: Final = "fp_review_token"
TOKEN_HEADER: Final = "x-review-token"
#: The names of this machine a request without a token may use as its host.
LOOPBACK_NAMES: Final = frozenset({"127.0.0.1", "localhost", "::1"})
INTERNAL_ERROR: Final = "internal error: the review page could not answer (the server's log says why)"
#: A label is a few hundred bytes; nothing the page sends comes near this.
MAX_BODY: Final = 64 * 1024
_HEADERS: Final = {
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    # People's conversations: no cache keeps a copy.
    "cache-control": "no-store",
}

_templates = Environment(loader=PackageLoader("faithfulness_pipeline.review", "templates"),
                         autoescape=select_autoescape(default=True, default_for_string=True))


def _host_name(host_header: str) -> str:
    try:
        return (urlsplit("//" + host_header).hostname or "").lower()
    except ValueError:
        return ""


class Guard:
    """What every request passes before the app: the token, the host, the origin of a write; and what every
    answer gets: no traceback, headers that keep the page out of caches, frames and other sites."""

    def __init__(self, app: ASGIApp, token: str | None, hosts: frozenset[str], store_spec: str) -> None:
        self.app = app
        self.token = token
        self.hosts = hosts
        self.store_spec = store_spec

    def _refusal(self, request: Request) -> Response | None:
        if self.token is not None:
            given = (request.cookies.get(TOKEN_COOKIE) or request.headers.get(TOKEN_HEADER)
                     or request.query_params.get("token") or "")
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return PlainTextResponse("forbidden: this review page needs its token (open it once with "
                                         "?token=... as its server was given it)", 403)
        elif _host_name(request.headers.get("host", "")) not in self.hosts:
            return PlainTextResponse("forbidden: this review page answers only to this machine's own names "
                                     "(127.0.0.1, localhost)", 403)
        if request.method not in ("GET", "HEAD"):
            if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
                return PlainTextResponse("a write to the review page is JSON (Content-Type: application/json)", 415)
            origin = request.headers.get("origin")
            if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
                return PlainTextResponse("forbidden: a write must come from the review page itself", 403)
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refusal = self._refusal(request)
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(scope=message)
                for name, value in _HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        if refusal is not None:
            await refusal(scope, receive, sending)
            return
        try:
            await self.app(scope, receive, sending)
        except Exception as exc:  # the page gets one line; the log names it, scrubbed
            log.error("review page: %s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__,
                      scrubbed(exc, self.store_spec))
            if not started:
                await PlainTextResponse(INTERNAL_ERROR, 500)(scope, receive, sending)


def _problem(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


Endpoint = Callable[[Request], Awaitable[Response]]


def _answering(endpoint: Endpoint) -> Endpoint:
    """``endpoint`` with a request the review cannot take (:class:`ReviewError`: 400) and a store that fails
    (503) as JSON the page shows in one line."""

    async def wrapped(request: Request) -> Response:
        try:
            return await endpoint(request)
        except ReviewError as exc:
            return _problem(str(exc), 400)
        except LabelStoreError as exc:
            log.error("review page: %s", exc)
            return _problem("the label store cannot be reached: the label was not saved (the server's log says "
                            "why)", 503)

    return wrapped


def build_app(session: ReviewSession, *, token: str | None = None, reviewer: str | None = None,
              host: str = "127.0.0.1") -> ASGIApp:
    """The review page of ``session``. ``token``: every request must carry it; ``reviewer``: the name of a
    request that gives none; ``host``: the address the server is bound to (a request naming it is local)."""
    default = None if reviewer is None else checked_reviewer(reviewer)

    def reviewer_of(request: Request) -> str | None:
        cookie = request.cookies.get(REVIEWER_COOKIE)
        return checked_reviewer(unquote(cookie)) if cookie else default

    def named(request: Request) -> str:
        name = reviewer_of(request)
        if name is None:
            raise ReviewError("name yourself first: open the page with ?reviewer=YOUR-NAME")
        return name

    def index_of(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ReviewError("an answer is named by its position in the queue (a number)")
        try:
            return int(value)
        except ValueError:
            raise ReviewError("an answer is named by its position in the queue (a number)") from None

    async def page(request: Request) -> Response:
        query = request.query_params
        if "reviewer" in query or "token" in query:
            # Kept in cookies, then the address is clean again (no token in the history or a shared link).
            response = RedirectResponse("/", status_code=303)
            if "reviewer" in query:
                given = checked_reviewer(query["reviewer"])
                response.set_cookie(REVIEWER_COOKIE, quote(given), httponly=True, samesite="strict")
            if token is not None and "token" in query:
                response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
            return response
        name = reviewer_of(request)
        nonce = secrets.token_urlsafe(16)
        view = None
        if name is not None:
            at = await run_in_threadpool(session.next_index, name)
            view = await run_in_threadpool(_view, session, name, at)
        html = _templates.get_template("review.html.j2").render(reviewer=name, total=session.total, view=view,
                                                                 nonce=nonce)
        csp = (f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; connect-src 'self'; "
               "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
        return HTMLResponse(html, headers={"content-security-policy": csp})

    async def next_item(request: Request) -> Response:
        name = named(request)
        after = request.query_params.get("after")
        at = await run_in_threadpool(session.next_index, name, None if after is None else index_of(after))
        return JSONResponse(await run_in_threadpool(_view, session, name, at))

    async def item(request: Request) -> Response:
        name = named(request)
        return JSONResponse(await run_in_threadpool(session.view, name, index_of(request.query_params.get("index"))))

    async def label(request: Request) -> Response:
        name = named(request)
        body = await _json(request)
        hallucinated, claims = body.get("hallucinated"), body.get("claims") or []
        if not isinstance(hallucinated, bool) or not isinstance(claims, list) or not all(
                isinstance(c, dict) for c in claims):
            raise ReviewError("a label is {\"index\", \"hallucinated\": true or false, \"claims\": [...]}")
        return JSONResponse(await run_in_threadpool(session.label, name, index_of(body.get("index")), hallucinated,
                                                    claims))

    async def undo(request: Request) -> Response:
        name = named(request)
        at = await run_in_threadpool(session.undo, name)
        if at is None:
            return _problem("nothing to undo: you have labelled no answer of this queue", 409)
        return JSONResponse({**await run_in_threadpool(session.view, name, at), "undone": True})

    async def progress(request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(session.progress, named(request)))

    routes = [
        Route("/", page, methods=["GET"]),
        Route("/api/next", _answering(next_item), methods=["GET"]),
        Route("/api/item", _answering(item), methods=["GET"]),
        Route("/api/label", _answering(label), methods=["POST"]),
        Route("/api/undo", _answering(undo), methods=["POST"]),
        Route("/api/progress", _answering(progress), methods=["GET"]),
    ]

    async def bad_name(request: Request, exc: Exception) -> Response:
        return PlainTextResponse(str(exc), 400)

    async def failed(request: Request, exc: Exception) -> Response:
        # Starlette answers with this, then raises the error on to the Guard, which logs it scrubbed.
        return PlainTextResponse(INTERNAL_ERROR, 500)

    app = Starlette(routes=routes, exception_handlers={ReviewError: bad_name, Exception: failed},
                    max_body_size=MAX_BODY)
    return Guard(app, token, LOOPBACK_NAMES | {_host_name(host) or host.lower()}, session.store.spec)


def _view(session: ReviewSession, reviewer: str, at: int | None) -> dict[str, Any]:
    if at is None:
        return {"done": True, "progress": session.progress(reviewer)}
    return session.view(reviewer, at)


async def _json(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise ReviewError("the request's body is not JSON") from None
    if not isinstance(body, dict):
        raise ReviewError("the request's body is a JSON object")
    return body
