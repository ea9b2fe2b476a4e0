"""What a failed request says: the failure the judge acts on (:class:`RequestFailed`), and the signs
read from an error to classify it (no connection, a web page instead of the API, an account out of credit).
``requests.Sender.classify`` decides with these; the batch API asks :func:`quota_used_up` too.
"""

from __future__ import annotations

import re
from typing import Final, Literal

from faithfulness_pipeline.judging.llm.valid_text import valid_text


class RequestFailed(Exception):
    """A request that produced no usable reply. ``kind`` decides what happens next: ``fatal`` no request of
    the run can work, ``give_up`` none of this pack's can for now (its items become error rows), ``reformat``
    the endpoint refused the response format and the run stepped down (``OutputMode``): send it again."""

    def __init__(
        self,
        kind: Literal["rate_limit", "transient", "timeout", "too_big", "isolate", "fatal", "stale", "give_up",
                      "reformat"],
        reason: str,
        sent: bool = True,
    ) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        self.sent = sent


def never_reached_a_server(exc: BaseException) -> bool:
    """Whether the request failed for want of a connection (refused, reset, unknown host), not with a reply.

    litellm reports such a failure of an OpenAI-compatible provider as a 500 (``InternalServerError``,
    "Connection error.") and other providers as ``APIConnectionError``; what happened is in the chain of
    causes: the client library's connection error. A timeout is not one: the server may just be slow.
    """
    from litellm import exceptions as litellm

    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        name = f"{type(current).__module__}.{type(current).__name__}"
        if isinstance(current, TimeoutError) or "Timeout" in name:
            return False
        if isinstance(current, ConnectionError | litellm.APIConnectionError) or name in CONNECTION_ERRORS:
            return True
        todo += [current.__cause__, current.__context__]
    return False


#: The client libraries' own "no connection" errors, by name: importing them here would tie this module
#: to litellm's choice of HTTP client.
CONNECTION_ERRORS: Final = frozenset({
    "openai.APIConnectionError", "httpx.ConnectError", "httpx.RemoteProtocolError", "httpx.ReadError",
    "anthropic.APIConnectionError", "aiohttp.client_exceptions.ClientConnectorError",
    "aiohttp.client_exceptions.ServerDisconnectedError", "aiohttp.client_exceptions.ClientOSError",
})


#: What a web page has and a JSON reply has not (tags, not the words: any language, any framework).
HTML: Final = re.compile(r"<\s*(?:!doctype\s+html|html[\s>]|head[\s>]|body[\s>]|title[\s>])", re.IGNORECASE)
TITLE: Final = re.compile(r"<title[^>]*>(.*?)</title", re.IGNORECASE | re.DOTALL)


def html_detail(text: str) -> str:
    """What the page is, in a few words: its title when it has one."""
    title = TITLE.search(text)
    shown = " ".join(title.group(1).split())[:80] if title else ""
    return valid_text(f"the endpoint sent a web page{f' titled {shown!r}' if shown else ''}")


#: How providers say the account is out of credit (OpenAI: a 429 ``insufficient_quota``, "You exceeded your
#: current quota"). Not "quota exceeded" alone: per-minute limits are worded that way and do pass.
QUOTA_CODES: Final = frozenset({"insufficient_quota", "billing_hard_limit_reached"})
QUOTA_WORDS: Final = ("insufficient_quota", "exceeded your current quota", "billing_hard_limit_reached",
                       "credit balance is too low")


def quota_used_up(exc: BaseException, detail: str) -> bool:
    """Whether a refused request says the account is out of credit: no request can work until it has some."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and (inner.get("code") in QUOTA_CODES or inner.get("type") in QUOTA_CODES):
            return True
    lowered = detail.lower()
    return any(words in lowered for words in QUOTA_WORDS)


def server_words(text: str) -> str:
    """The server's part of a litellm error text (litellm puts its own words, naming the provider, first)."""
    return text.split(" - ", 1)[1] if " - " in text else text
