"""Requests of the litellm judge: how often packs were tried, and the one place a request is sent.

:class:`Sender` is the only place a completion is asked of litellm: one request under the shared
:class:`RequestLimiter`, with litellm's own retries off, and the classification of its failure (rate
limit, transient, timeout, too big, an item to isolate, fatal, a refused response format) that decides
what the judge does next. Which response format a request carries is the run's :class:`OutputMode`'s.
Where the model card says so (``ModelCard.stream``) the reply is streamed: a request is then given up on
when its server goes silent, not when the reply is long in coming, and the tokens are reported as they
arrive.
It knows nothing of steps, plans or the store, so the judge's retry loop (``PackRunner._run_pack``)
reads as policy while the litellm specifics stay here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Literal

from faithfulness_pipeline.core.port import JudgeStats
from faithfulness_pipeline.judging.llm.card import import_litellm
from faithfulness_pipeline.judging.llm.limits import RequestLimiter, retry_after_from_headers
from faithfulness_pipeline.judging.llm.output_mode import Mode, OutputMode
from faithfulness_pipeline.judging.llm.packing import Count
from faithfulness_pipeline.judging.llm.reachability import shown
from faithfulness_pipeline.judging.llm.valid_text import valid_text

if TYPE_CHECKING:
    from faithfulness_pipeline.settings.judge import JudgeSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Reply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    #: why a reply that came back holds no answer to parse (the model refused, no choices, null content);
    #: None for a reply with content. Asking the same request again would get the same reply.
    unanswered: str | None = None
    #: of ``prompt_tokens``, those the provider served from its prompt cache (and bills at its cached price)
    cached_prompt_tokens: int = 0


#: 429s are the server asking for patience, not a broken request: they get a larger retry budget.
RATE_LIMIT_RETRY_FACTOR: Final = 4
#: Connection failures in a row (no reply of any kind between them) that trip the circuit breaker: at
#: least this many, and more than one wave of requests in flight, so that a failure has outlived a
#: back-off before the endpoint is taken for dead.
BREAKER_MIN_FAILURES: Final = 8


def breaker_threshold(max_concurrency: int) -> int:
    return max(BREAKER_MIN_FAILURES, max_concurrency + 1)


@dataclass(frozen=True, slots=True)
class Tries:
    """How often the items of a pack have been sent and failed; sub-packs inherit it."""

    sent: int = 0
    errors: int = 0  # failed requests and invalid replies
    limited: int = 0  # 429 replies
    #: (the unusable reply, what was wrong with it): quoted in the next request of the same items
    repair: tuple[str, str] | None = None

    def sending(self) -> Tries:
        return replace(self, sent=self.sent + 1)

    def failed(self, rate_limited: bool) -> Tries:
        if rate_limited:
            return replace(self, limited=self.limited + 1)
        return replace(self, errors=self.errors + 1)

    def unusable_reply(self, reply: str, why: str) -> Tries:
        return replace(self, repair=(reply, why))

    def exhausted(self, max_retries: int) -> bool:
        return self.errors > max_retries or self.limited > RATE_LIMIT_RETRY_FACTOR * max(1, max_retries)

    def gave_up(self, reason: str) -> str:
        return f"gave up after {self.sent} requests: {reason}"


class StreamTimeout(TimeoutError):
    """A streamed request given up on by one of the judge's own bounds; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


#: Called with how many reply tokens just arrived on a streamed request (progress during a long request).
Receiving = Callable[[int], None]


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


#: Counting time of one turn on the counting thread, ~20 verdict items: the packs it closes are queued
#: (and can be sent) only when the turn is over. Shorter turns cost a thread hop and a pass of the event
#: loop each; counting on the loop itself, 2 ms starved the packing on a busy machine and 8 ms kept the
#: loop's 99th percentile wait near 0.1 s. On a thread the loop is not blocked while the tokenizer runs.
TURN_S: Final = 0.008
#: How far ahead of its arrival a waiting request queues (``RequestLimiter.slot``). Extraction first:
#: its replies are what the verdict requests wait for. Then per token of its reply budget: the long
#: requests of a wave take the free slots first, so a run's last replies do not all come from long
#: packs sent last. Bounded: a request is passed only by ones that arrived at most the difference of
#: the two head starts later (about 2.5 s at most for packs of a few hundred tokens).
EXTRACTION_HEAD_START_S: Final = 2.0
HEAD_START_S_PER_TOKEN: Final = 0.001


@dataclass(frozen=True, slots=True)
class Turns:
    """What the calls of one judge share on one event loop."""

    loop: asyncio.AbstractEventLoop
    packs: asyncio.Semaphore  # packs taken off the queues and not yet answered: 2 x max_concurrency
    counting: asyncio.Lock  # held by the call whose items are being counted and packed


class Sender:
    """Sends one request through litellm under the shared limiter; classifies what went wrong.

    Holds the API key (handed to litellm only) and what the requests so far taught: ``fatal`` once a
    failure means no further request can work (a refused key, an unknown model), and how many replies
    came back (a refused request before the first reply is the setup's fault, after it an item's).
    """

    def __init__(
        self,
        config: JudgeSettings,
        *,
        api_key: str | None,
        api_key_env: str | None,
        limiter: RequestLimiter,
        count_tokens: Count,
        redact: Callable[[str], str],
        stats: JudgeStats,
        output: OutputMode,
        stream: bool = False,
        receiving: Receiving | None = None,
    ) -> None:
        self.config = config
        self.output = output
        self.stream = stream
        self._receiving = receiving
        self.model = config.model or ""
        self.endpoint = shown(config.api_base) if config.api_base else None
        self.api_key_env = api_key_env
        self.limiter = limiter
        self.count_tokens = count_tokens
        self.fatal: str | None = None  # set by a failure that dooms every further request
        self._api_key = api_key
        self._redact = redact
        self._stats = stats  # the judge's: requests are counted as they are sent
        self._replies = 0  # successful requests so far
        self._unreachable = 0  # connection failures (and HTML pages) since the endpoint last answered anything
        self._breaker = breaker_threshold(config.max_concurrency)
        #: a Retry-After longer than this fails the requests it holds back instead of pausing them
        self.retry_after_max_s = (
            config.retry_after_max_s if config.retry_after_max_s is not None
            else max(config.backoff_max_s, config.backoff_base_s)
        )
        self._held_until = float("-inf")  # on the limiter's clock: until then requests fail unsent
        self._held_reason = ""
        self._unmetered = 0  # streamed replies whose server sent no usage: their tokens are estimates

    async def send(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any] | None,
        max_tokens: int,
        prompt_estimate: int,
        still_needed: Callable[[], bool] | None = None,
        head_start_s: float = 0.0,
    ) -> Reply:
        """One request. ``schema`` is the response_format a reply held to the JSON schema needs; the request
        carries it, JSON mode or nothing, as the run's :class:`OutputMode` says. ``still_needed`` is asked
        once the request holds its slot, right before it is sent: False (its items were stored meanwhile, by
        another process) gives up the slot unsent ("stale")."""
        # The turn before the slot: requests waiting for the turn hold no slot the one holding it needs.
        async with self.output.trial() as mode:
            response_format = None if schema is None else self.output.response_format(schema, mode)
            reply = await self._send(messages, response_format, mode, max_tokens, prompt_estimate, still_needed,
                                     head_start_s)
            self.output.answered(mode)
        return reply

    async def _send(
        self,
        messages: list[dict[str, str]],
        response_format: dict[str, Any] | None,
        mode: Mode,
        max_tokens: int,
        prompt_estimate: int,
        still_needed: Callable[[], bool] | None,
        head_start_s: float,
    ) -> Reply:
        litellm = import_litellm()
        cfg = self.config
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": cfg.temperature,
            "max_tokens": max_tokens,
            "timeout": cfg.timeout_s,
            # Our limiter must see every 429: no retries inside litellm or the provider SDK.
            "num_retries": 0,
            "max_retries": 0,
            "drop_params": True,
        }
        if self.stream:
            kwargs["stream"] = True
            kwargs["stream_options"] = {"include_usage": True}
            # The client's timeout bounds each read: a server of one's own sends nothing while the request
            # waits in its queue and while it reads the prompt, which can take minutes on a CPU. The judge's
            # own bounds (``_streamed``) tell that from silence in the middle of a reply.
            kwargs["timeout"] = cfg.stream_max_s
        if cfg.seed is not None:
            kwargs["seed"] = cfg.seed
        if cfg.api_base:
            kwargs["api_base"] = cfg.api_base
        if self._api_key:
            kwargs["api_key"] = self._api_key
        if response_format is not None:
            kwargs["response_format"] = response_format
        async with self.limiter.slot(prompt_estimate + max_tokens, head_start_s) as slot:
            if self.fatal is not None:  # learnt while this request waited for its slot
                raise RequestFailed("fatal", self.fatal, sent=False)
            if self.limiter.now() < self._held_until:  # a Retry-After too long to wait holds every request
                slot.unused()
                raise RequestFailed("give_up", self._held_reason, sent=False)
            if still_needed is not None and not still_needed():
                slot.unused()
                raise RequestFailed("stale", "stored by another process while waiting for a slot", sent=False)
            self._stats.requests += 1
            try:
                if self.stream:
                    answer = await self._streamed(litellm, kwargs)
                else:
                    # ``timeout`` bounds the whole request: the client's own timeout bounds each read, so a body
                    # trickling in a byte at a time would hold the request (and its slot) for as long as the
                    # server likes. A context manager, not wait_for: no extra task and loop hop per request.
                    async with asyncio.timeout(cfg.timeout_s):
                        answer = _Answer.of(await litellm.acompletion(**kwargs))
            except Exception as exc:
                raise self.classify(exc, mode if response_format is not None else "prompt") from None
            text, unanswered = answer.content()
            usage = answer.usage
            prompt = _int(_field(usage, "prompt_tokens")) or prompt_estimate
            completion = _int(_field(usage, "completion_tokens")) or self.count_tokens(text)
            cached = cached_prompt_tokens(usage, prompt)
            slot.settle(prompt + completion)
        self.limiter.on_success()
        self._replies += 1
        self._unreachable = 0
        return Reply(text=text, prompt_tokens=prompt, completion_tokens=completion, unanswered=unanswered,
                     cached_prompt_tokens=cached)

    async def _streamed(self, litellm: Any, kwargs: dict[str, Any]) -> _Answer:
        """One streamed request, read to its end. Two bounds of the judge's own: ``stream_max_s`` on the whole
        request, the wait for its first piece included, and, once pieces come, ``timeout_s`` on the silence
        after each. A request that breaks one is closed (the server stops generating) and raises
        :class:`StreamTimeout`."""
        cfg = self.config
        loop = asyncio.get_running_loop()
        answer = _Answer(choices=False)
        whole, silence = asyncio.timeout(cfg.stream_max_s), asyncio.timeout(None)
        stream: Any = None
        try:
            async with whole:
                stream = await litellm.acompletion(**kwargs)
                body = await _not_streamed(stream)
                if body is not None:
                    return _whole_answer(body)
                async with silence:
                    try:
                        async for chunk in stream:
                            # A new deadline per piece: a reply may take as long as it likes while pieces come.
                            silence.reschedule(loop.time() + cfg.timeout_s)
                            piece = answer.add(chunk)
                            if piece and self._receiving is not None:
                                self._heard(self.count_tokens(piece))
                    except Exception as exc:
                        if answer.pieces and _says(exc, REPEATING):
                            # litellm ends a reply that repeats one piece over and over (a model in a loop). What
                            # came is the reply, cut: sent again unchanged it would loop again; parsed, it is
                            # re-asked in smaller packs or with a repair message.
                            answer.finish_reason = "length"
                        elif not _says(exc, UNFINISHED):
                            raise
                        # else the server ended the stream properly, if without a finish_reason: what came is the
                        # reply (none at all: a reply without choices, never sent again unchanged)
        except TimeoutError:
            if silence.expired():
                raise StreamTimeout(f"timed out: nothing came for {cfg.timeout_s:g} s in the middle of a streamed "
                                    f"reply (--timeout)") from None
            if whole.expired():
                raise StreamTimeout(f"timed out: a streamed reply took over {cfg.stream_max_s:g} s in all, the wait "
                                    f"for its first token included (--stream-max)") from None
            raise
        finally:
            if stream is not None:  # the connection goes, so the server stops working on a reply given up
                await stream.aclose()
        kept = _kept_usage(stream)
        if kept is not _UNKNOWN:
            # The server's own usage, as litellm kept it: at the end of a stream litellm hands out a usage of its
            # own counting when the server sent none, and none when the stream did not end normally.
            answer.usage = kept
        if answer.usage is None:
            self._unmetered += 1
            if self._unmetered == 1:
                self._stats.notes.append(
                    "a streamed reply came without its usage (the server sent none, or the reply was cut): its "
                    "tokens and cost are the judge's estimates; --stream no asks for whole replies")
        return answer

    def _heard(self, tokens: int) -> None:
        """Tells the listener of tokens that arrived; one that fails is dropped, never the request."""
        listener = self._receiving
        if listener is None:
            return
        try:
            listener(tokens)
        except Exception as exc:
            self._receiving = None
            log.warning("the receiving callback failed (%s: %s): requests go on without it", type(exc).__name__,
                        str(exc)[:200])

    def classify(self, exc: BaseException, mode: Mode = "prompt") -> RequestFailed:
        """What a failed request sent in ``mode`` means (``mode``: the response format it carried)."""
        from litellm import exceptions as litellm

        whole = valid_text(self._redact(" ".join(str(exc).split())))
        detail = whole[:200]
        name = type(exc).__name__
        status = _int(getattr(exc, "status_code", None))
        refusable = not isinstance(exc, litellm.ContextWindowExceededError | litellm.ContentPolicyViolationError)
        if mode != "prompt" and status in (400, 422) and refusable and self.output.refused(mode, _server_words(whole)):
            self._unreachable = 0
            return RequestFailed("reformat", f"the endpoint refused the response format: {detail}")
        if (isinstance(exc, litellm.RateLimitError) or status in (400, 403, 429)) and quota_used_up(exc, detail):
            # Waiting cannot help: no request of any pack will work until the account has credit again.
            where = f" (key from {self.api_key_env})" if self.api_key_env else ""
            self.fatal = (
                f"not scored: the provider says the account's quota is used up (insufficient_quota{where}): "
                f"{detail[:160]}; add credit or raise the limit, then re-run: results so far are kept"
            )
            self._stats.notes.append(self.fatal)
            return RequestFailed("fatal", self.fatal)
        if isinstance(exc, litellm.RateLimitError):
            self._unreachable = 0
            headers = getattr(exc, "litellm_response_headers", None)
            response = getattr(exc, "response", None)
            if headers is None and response is not None:
                headers = getattr(response, "headers", None)
            retry_after = retry_after_from_headers(dict(headers) if headers else None)
            if retry_after is not None and retry_after > self.retry_after_max_s:
                return self._held_back(retry_after)
            pause = self.limiter.on_rate_limited(retry_after)
            return RequestFailed("rate_limit", f"rate limited (429; paused {pause:.3g} s)")
        if isinstance(exc, litellm.ContextWindowExceededError):
            return RequestFailed("too_big", f"the request exceeds the model's context window: {detail}")
        if isinstance(exc, StreamTimeout):
            return RequestFailed("timeout", exc.reason)
        if isinstance(exc, litellm.Timeout | TimeoutError | asyncio.TimeoutError):
            return RequestFailed("timeout", f"timed out after {self.config.timeout_s:g} s")
        if isinstance(exc, litellm.AuthenticationError | litellm.PermissionDeniedError | litellm.NotFoundError):
            where = f" (key from {self.api_key_env})" if self.api_key_env else ""
            self.fatal = f"{name}{where}: {detail}"
            return RequestFailed("fatal", self.fatal)
        if isinstance(exc, litellm.ContentPolicyViolationError):
            return RequestFailed("isolate", f"the provider refused the content: {detail}")
        if _never_reached_a_server(exc):
            return self._connection_failed(detail)
        if _HTML.search(str(exc)) is not None:
            # A web page where the API's JSON should be (a proxy's login page, sent with status 200, that
            # litellm reports as a 500): no provider is answering, so it counts toward the circuit breaker.
            return self._connection_failed(_html_detail(self._redact(str(exc))), "HTML, not JSON: a proxy or a "
                                           "wrong --api-base?")
        self._unreachable = 0  # the endpoint answered, if with an error
        if isinstance(exc, litellm.BadRequestError) or (status is not None and 400 <= status < 500 and status != 408):
            # Once requests have worked, a refused one is about its items: isolate them. Before that it is
            # most likely the setup (a parameter the server rejects): do not multiply the requests.
            return RequestFailed("isolate" if self._replies else "fatal", f"{name}: {detail}")
        return RequestFailed("transient", f"{name}{f' {status}' if status else ''}: {detail}")

    def _connection_failed(self, detail: str, what: str = "connection error") -> RequestFailed:
        """A request that reached no server (or no API: ``what`` says what came back instead). Many in a row
        (``breaker_threshold``) trip the circuit breaker: the endpoint is taken for dead, nothing more is sent,
        and every item not yet judged becomes an error row saying so (results so far are kept, in the store
        too, for the re-run)."""
        self._unreachable += 1
        if self._unreachable < self._breaker or self.fatal is not None:
            return RequestFailed("transient", f"{what}: {detail}")
        where = self.endpoint or "the provider"
        self.fatal = (
            f"not scored: the judge's endpoint {where} could not be reached for {self._unreachable} requests in a "
            f"row (circuit breaker; last: {what}: {detail[:120]}); re-run once it is back: results so far are kept"
        )
        self._stats.notes.append(self.fatal)
        return RequestFailed("fatal", self.fatal)

    def _held_back(self, retry_after_s: float) -> RequestFailed:
        """A 429 whose Retry-After is longer than ``retry_after_max_s`` (a daily or hourly limit): sleeping it
        out would hold the run for hours, so this pack and every request until then fail at once, unsent."""
        until = self.limiter.now() + retry_after_s
        first = self._held_until < self.limiter.now()
        self._held_until = max(self._held_until, until)
        self._held_reason = (
            f"rate limited (429) with Retry-After {retry_after_s:g} s, longer than the {self.retry_after_max_s:g} s "
            f"waited out at most (--retry-after-max, FP_JUDGE_RETRY_AFTER_MAX_S): not waited; re-run once the "
            f"provider's limit has reset (results so far are kept), or raise --retry-after-max"
        )
        if first:
            self._stats.notes.append(self._held_reason)
        return RequestFailed("give_up", self._held_reason)


def _never_reached_a_server(exc: BaseException) -> bool:
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
        if isinstance(current, ConnectionError | litellm.APIConnectionError) or name in _CONNECTION_ERRORS:
            return True
        todo += [current.__cause__, current.__context__]
    return False


#: The client libraries' own "no connection" errors, by name: importing them here would tie this module
#: to litellm's choice of HTTP client.
_CONNECTION_ERRORS: Final = frozenset({
    "openai.APIConnectionError", "httpx.ConnectError", "httpx.RemoteProtocolError", "httpx.ReadError",
    "anthropic.APIConnectionError", "aiohttp.client_exceptions.ClientConnectorError",
    "aiohttp.client_exceptions.ServerDisconnectedError", "aiohttp.client_exceptions.ClientOSError",
})


@dataclass(slots=True)
class _Answer:
    """What came back of one request, whole or streamed: enough to say what it holds and what it cost."""

    #: whether the reply had any choice (a streamed one: whether any piece had one)
    choices: bool
    text: str | None = None
    refusal: str | None = None
    finish_reason: str | None = None
    usage: Any = None
    #: a streamed reply's pieces of text and of refusal, joined when it has ended
    pieces: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    @staticmethod
    def of(response: Any) -> _Answer:
        """A whole reply: litellm's response, or the JSON of a completion (a dict)."""
        choices = _field(response, "choices")
        if not choices or not isinstance(choices, list):
            return _Answer(choices=False, usage=_field(response, "usage"))
        message = _field(choices[0], "message")
        return _Answer(choices=True, text=_field(message, "content"), refusal=_field(message, "refusal"),
                       finish_reason=_field(choices[0], "finish_reason"), usage=_field(response, "usage"))

    def add(self, chunk: Any) -> str:
        """Takes one streamed chunk in; returns the reply text it carried ("" for none)."""
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.usage = usage
        choices = getattr(chunk, "choices", None)
        if not choices:
            return ""
        self.choices = True
        choice = choices[0]
        delta = getattr(choice, "delta", None)
        text = getattr(delta, "content", None)
        refusal = getattr(delta, "refusal", None)
        if isinstance(refusal, str) and refusal:
            self.refused.append(refusal)
        finish = getattr(choice, "finish_reason", None)
        if finish is not None:
            self.finish_reason = finish
        if not isinstance(text, str):
            return ""
        # Content, if only "" (a first piece that names the role): a reply whose content is "" is an empty
        # answer, as a whole one would be, not a null one.
        self.text = ""
        self.pieces.append(text)
        return text

    def content(self) -> tuple[str, str | None]:
        """The reply's text, and why it holds no answer when it holds none (None when it has content)."""
        if not self.choices:
            return "", "no answer: the reply has no choices (a content filter, or a proxy that drops them)"
        content = "".join(self.pieces) if self.pieces else self.text
        refusal = "".join(self.refused) if self.refused else self.refusal
        refused = isinstance(refusal, str) and bool(refusal.strip())
        # A refusal streams beside a content of "" at most (the piece naming the role): that is no answer.
        if isinstance(content, str) and (content or not refused):
            # Valid Unicode from here on: the reply is counted, quoted back in a repair message and parsed.
            return valid_text(content), None
        if refused and isinstance(refusal, str):
            return "", f"the model refused: {valid_text(' '.join(refusal.split()))}"
        if self.finish_reason == "content_filter":
            return "", "no answer: the provider's content filter withheld it"
        return "", "no answer: the reply's content is null"


#: What litellm's errors say when it ends a stream that repeats one piece over and over
#: (``CustomStreamWrapper.raise_on_model_repetition``), and when a stream ended without a finish_reason;
#: tests/judging/test_private_litellm.py checks both.
REPEATING: Final = "The model is repeating the same chunk"
UNFINISHED: Final = "Stream ended before a finish_reason was received"


def _says(exc: BaseException, words: str) -> bool:
    """Whether ``exc``, or an error it was raised from, says ``words``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if words in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


#: Not known: litellm keeps no chunks where the judge can see them.
_UNKNOWN: Final = object()


def _kept_usage(stream: Any) -> Any:
    """The usage the server sent in a stream, None when it sent none, :data:`_UNKNOWN` when litellm does not
    say. litellm keeps the server's usage chunk among the stream's chunks (``CustomStreamWrapper.chunks``)."""
    kept = getattr(stream, "chunks", None)
    if not isinstance(kept, list):
        return _UNKNOWN
    usages = [usage for chunk in kept if (usage := getattr(chunk, "usage", None)) is not None]
    return usages[-1] if usages else None


async def _not_streamed(stream: Any) -> str | None:
    """The body of a reply that came whole to a streamed request (a proxy's web page, a server that ignores
    ``stream``), None when the reply is a stream. Told by its content type (litellm keeps the reply's
    headers, ``llm_provider-`` before each name)."""
    hidden = getattr(stream, "_hidden_params", None)
    headers = hidden.get("additional_headers") if isinstance(hidden, dict) else None
    kind = str(headers.get("llm_provider-content-type") or "") if isinstance(headers, dict) else ""
    if not kind or "text/event-stream" in kind:
        return None
    response = getattr(getattr(stream, "completion_stream", None), "response", None)
    read = getattr(response, "aread", None)
    if read is None:
        return ""
    raw = await read()
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)


class NotAStream(Exception):
    """A reply to a streamed request that is neither a stream nor a completion; its text is quoted."""


def _whole_answer(body: str) -> _Answer:
    """A completion that came whole to a streamed request, read as the unstreamed request would have been."""
    try:
        completion = json.loads(body)
    except ValueError:
        completion = None
    if not isinstance(completion, dict) or "choices" not in completion:
        raise NotAStream(f"the server answered a streamed request with no stream and no completion: {body[:2000]}")
    return _Answer.of(completion)


#: What a web page has and a JSON reply has not (tags, not the words: any language, any framework).
_HTML: Final = re.compile(r"<\s*(?:!doctype\s+html|html[\s>]|head[\s>]|body[\s>]|title[\s>])", re.IGNORECASE)
_TITLE: Final = re.compile(r"<title[^>]*>(.*?)</title", re.IGNORECASE | re.DOTALL)


def _html_detail(text: str) -> str:
    """What the page is, in a few words: its title when it has one."""
    title = _TITLE.search(text)
    shown = " ".join(title.group(1).split())[:80] if title else ""
    return valid_text(f"the endpoint sent a web page{f' titled {shown!r}' if shown else ''}")


#: How providers say the account is out of credit (OpenAI: a 429 ``insufficient_quota``, "You exceeded your
#: current quota"). Not "quota exceeded" alone: per-minute limits are worded that way and do pass.
_QUOTA_CODES: Final = frozenset({"insufficient_quota", "billing_hard_limit_reached"})
_QUOTA_WORDS: Final = ("insufficient_quota", "exceeded your current quota", "billing_hard_limit_reached",
                       "credit balance is too low")


def quota_used_up(exc: BaseException, detail: str) -> bool:
    """Whether a refused request says the account is out of credit: no request can work until it has some."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and (inner.get("code") in _QUOTA_CODES or inner.get("type") in _QUOTA_CODES):
            return True
    lowered = detail.lower()
    return any(words in lowered for words in _QUOTA_WORDS)


def _server_words(text: str) -> str:
    """The server's part of a litellm error text (litellm puts its own words, naming the provider, first)."""
    return text.split(" - ", 1)[1] if " - " in text else text


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _field(value: Any, name: str) -> Any:
    """``name`` of an object litellm made, or of the JSON it would have been made from."""
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def cached_prompt_tokens(usage: Any, prompt: int) -> int:
    """The prompt tokens a reply's ``usage`` says were served from the provider's prompt cache: OpenAI's
    ``prompt_tokens_details.cached_tokens``, where litellm also puts Anthropic's ``cache_read_input_tokens``
    and DeepSeek's ``prompt_cache_hit_tokens`` (a dict in a batch output line, an object from litellm).
    Never more than the ``prompt`` tokens billed, never negative: a count that cannot be is not believed."""

    cached = _int(_field(_field(usage, "prompt_tokens_details"), "cached_tokens")) or 0
    return cached if 0 <= cached <= prompt else 0
