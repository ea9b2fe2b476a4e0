"""Requests of the litellm judge: the one place a request is sent.

:class:`Sender` is the only place a completion is asked of litellm: one request under the shared
:class:`RequestLimiter`, with litellm's own retries off, and the classification of its failure (rate
limit, transient, timeout, too big, an item to isolate, fatal, a refused response format) that decides
what the judge does next. Which response format a request carries is the run's :class:`OutputMode`'s.
Where the model card says so (``ModelCard.stream``) the reply is streamed: a request is then given up on
when its server goes silent, not when the reply is long in coming, and the tokens are reported as they
arrive (``streams``). What a request asks is ``chat``'s (the batch lines ask the same), what came back
``replies``', what a failure says ``failures``'.
It knows nothing of steps, plans or the store, so the judge's retry loop (``runner.PackRunner``) reads
as policy while the litellm specifics stay here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from faithfulness_pipeline.core.port import JudgeStats
from faithfulness_pipeline.judging.llm.card import import_litellm
from faithfulness_pipeline.judging.llm.chat import chat_body
from faithfulness_pipeline.judging.llm.failures import (
    HTML,
    RequestFailed,
    html_detail,
    never_reached_a_server,
    quota_used_up,
    server_words,
)
from faithfulness_pipeline.judging.llm.in_flight import StreamsInFlight
from faithfulness_pipeline.judging.llm.limits import RequestLimiter, retry_after_from_headers
from faithfulness_pipeline.judging.llm.output_mode import Mode, OutputMode
from faithfulness_pipeline.judging.llm.packing import Count
from faithfulness_pipeline.judging.llm.reachability import shown
from faithfulness_pipeline.judging.llm.replies import (
    Answer,
    Reply,
    cached_prompt_tokens,
    int_or_none,
    reported_tokens,
)
from faithfulness_pipeline.judging.llm.server_limits import PROBE_TIMEOUT_S, server_working
from faithfulness_pipeline.judging.llm.streams import StreamTimeout, read_stream
from faithfulness_pipeline.judging.llm.valid_text import valid_text

if TYPE_CHECKING:
    from faithfulness_pipeline.judging.llm.part_settings import RequestSettings

log = logging.getLogger(__name__)


#: Connection failures in a row (no reply of any kind between them) that trip the circuit breaker: at
#: least this many, and more than one wave of requests in flight, so that a failure has outlived a
#: back-off before the endpoint is taken for dead.
BREAKER_MIN_FAILURES: Final = 8


def breaker_threshold(max_concurrency: int) -> int:
    return max(BREAKER_MIN_FAILURES, max_concurrency + 1)


#: Called with how many reply tokens just arrived on a streamed request (progress during a long request).
Receiving = Callable[[int], None]


class Sender:
    """Sends one request through litellm under the shared limiter; classifies what went wrong.

    Holds the API key (handed to litellm only) and what the requests so far taught: ``fatal`` once a
    failure means no further request can work (a refused key, an unknown model), and how many replies
    came back (a refused request before the first reply is the setup's fault, after it an item's).
    """

    def __init__(
        self,
        request_settings: RequestSettings,
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
        working_url: str | None = None,
    ) -> None:
        self.request_settings = request_settings
        self.output = output
        self.stream = stream
        self._working_url = working_url
        self._receiving = receiving
        self.model = request_settings.model
        self.endpoint = shown(request_settings.api_base) if request_settings.api_base else None
        self.api_key_env = api_key_env
        self.limiter = limiter
        self.count_tokens = count_tokens
        self.fatal: str | None = None  # set by a failure that dooms every further request
        self._api_key = api_key
        self._redact = redact
        self._stats = stats  # the judge's: requests are counted as they are sent
        self._replies = 0  # successful requests so far
        self._unreachable = 0  # connection failures (and HTML pages) since the endpoint last answered anything
        # The limiter holds the concurrency the settings asked for: read there, as every other part does.
        self._breaker = breaker_threshold(limiter.max_in_flight)
        #: a Retry-After longer than this fails the requests it holds back instead of pausing them
        self.retry_after_max_s = request_settings.retry_after_max_s
        self._held_until = float("-inf")  # on the limiter's clock: until then requests fail unsent
        self._held_reason = ""
        self._unmetered = 0  # streamed replies whose server sent no usage: their tokens are estimates
        self._waited_out = 0  # silences past timeout_s waited out because the server said it was working
        self._streams = StreamsInFlight()  # given up by ``stop``

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
        asked = self.request_settings
        kwargs = chat_body(self.model, messages, asked.sampling, max_tokens, response_format) | self._transport()
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
            task = asyncio.current_task()
            assert task is not None
            cancelling = task.cancelling()
            try:
                if self.stream:
                    answer = await self._streamed(litellm, kwargs)
                else:
                    # ``timeout`` bounds the whole request: the client's own timeout bounds each read, so a body
                    # trickling in a byte at a time would hold the request (and its slot) for as long as the
                    # server likes. A context manager, not wait_for: no extra task and loop hop per request.
                    async with asyncio.timeout(asked.timeout_s):
                        answer = Answer.of(await litellm.acompletion(**kwargs))
            except asyncio.CancelledError:
                # Given up by ``stop``: the request ends like any other that no request of the run can follow.
                if self._streams.given_up(task, cancelling) and self.fatal is not None:
                    raise RequestFailed("fatal", self.fatal) from None
                raise
            except Exception as exc:
                raise self.classify(exc, mode if response_format is not None else "prompt") from None
            finally:
                self._streams.done(task)
            text, unanswered = answer.content()
            usage = answer.usage
            prompt_reported, refused_prompt = reported_tokens(usage, "prompt_tokens")
            completion_reported, refused_completion = reported_tokens(usage, "completion_tokens")
            self._refuse_usage(refused_prompt, refused_completion)
            prompt = prompt_reported or prompt_estimate
            completion = completion_reported or self.count_tokens(text)
            cached = cached_prompt_tokens(usage, prompt)
            slot.settle(prompt + completion)
        self.limiter.on_success()
        self._replies += 1
        self._unreachable = 0
        return Reply(text=text, prompt_tokens=prompt, completion_tokens=completion, unanswered=unanswered,
                     cached_prompt_tokens=cached)

    def _refuse_usage(self, *refused: str | None) -> None:
        """A token count that cannot be (negative, fractional, beyond any window, not a number) is never billed
        or summed: the reply is billed by the judge's own count, the refusal is counted and the first named."""
        named = [r for r in refused if r]
        if not named:
            return
        self._stats.refused_usage += 1
        if self._stats.refused_usage == 1:
            self._stats.notes.append(
                f"the server reported token counts that cannot be ({', '.join(named)}): not billed; such replies "
                "are billed by the judge's own count of their tokens (refused_usage counts them)"
            )

    def _transport(self) -> dict[str, Any]:
        """How a request is sent, beside what it asks (``chat.chat_body``): the client's timeout, no retries
        of litellm's own, the endpoint and the key."""
        asked = self.request_settings
        kwargs: dict[str, Any] = {
            "timeout": asked.timeout_s,
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
            # own bounds (``streams.read_stream``) tell that from the silence of a reply that has begun.
            kwargs["timeout"] = asked.stream_max_s
        if asked.api_base:
            kwargs["api_base"] = asked.api_base
        if self._api_key:
            kwargs["api_key"] = self._api_key
        return kwargs

    async def _working(self) -> bool:
        """Whether the server says it is working now (a thread: the probe is a blocking standard-library call)."""
        assert self._working_url is not None
        timeout_s = min(self.request_settings.timeout_s, PROBE_TIMEOUT_S)
        try:
            # The probe's own timeout bounds each read: a ``/slots`` that trickles must not hold the silence open.
            async with asyncio.timeout(timeout_s + 1.0):
                busy = await asyncio.to_thread(server_working, self._working_url, api_key=self._api_key,
                                               timeout_s=timeout_s)  # fmt: skip
        except TimeoutError:
            busy = False
        if busy:
            self._waited_out += 1
            if self._waited_out == 1:
                self._stats.notes.append(
                    f"a streamed reply went silent for over {self.request_settings.timeout_s:g} s (--timeout) while "
                    "the server said it was working (llama.cpp /slots: reading a prompt, or the request queued "
                    f"behind others): waited for, not cancelled, up to --stream-max "
                    f"{self.request_settings.stream_max_s:g} s")
        return busy

    async def _streamed(self, litellm: Any, kwargs: dict[str, Any]) -> Answer:
        """One streamed request, read to its end under the judge's own bounds (``streams.read_stream``)."""
        asked = self.request_settings
        task = asyncio.current_task()
        assert task is not None
        answer, streamed = await read_stream(litellm, kwargs, stream_max_s=asked.stream_max_s,
                                             timeout_s=asked.timeout_s, on_piece=self._piece,
                                             still_working=None if self._working_url is None else self._working,
                                             on_head=lambda: self._streams.begun(task))
        if streamed and answer.usage is None:
            self._unmetered += 1
            if self._unmetered == 1:
                self._stats.notes.append(
                    "a streamed reply came without its usage (the server sent none, or the reply was cut): its "
                    "tokens and cost are the judge's estimates; --stream no asks for whole replies")
        return answer

    def _piece(self, piece: str) -> None:
        if self._receiving is not None:
            self._heard(self.count_tokens(piece))

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
        # litellm puts the traceback of its own failure into the message (a reply it cannot read: usage that is
        # not whole numbers, say): the row's error keeps litellm's sentence, not its source lines.
        whole = whole.split(" Traceback (most recent call last)", 1)[0]
        detail = whole[:200]
        name = type(exc).__name__
        status = int_or_none(getattr(exc, "status_code", None))
        refusable = not isinstance(exc, litellm.ContextWindowExceededError | litellm.ContentPolicyViolationError)
        if mode != "prompt" and status in (400, 422) and refusable and self.output.refused(mode, server_words(whole)):
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
            return RequestFailed("timeout", f"timed out after {self.request_settings.timeout_s:g} s")
        if isinstance(exc, litellm.AuthenticationError | litellm.PermissionDeniedError | litellm.NotFoundError):
            where = f" (key from {self.api_key_env})" if self.api_key_env else ""
            self.fatal = f"{name}{where}: {detail}"
            return RequestFailed("fatal", self.fatal)
        if isinstance(exc, litellm.ContentPolicyViolationError):
            return RequestFailed("isolate", f"the provider refused the content: {detail}")
        if never_reached_a_server(exc):
            return self._connection_failed(detail)
        if HTML.search(str(exc)) is not None:
            # A web page where the API's JSON should be (a proxy's login page, sent with status 200, that
            # litellm reports as a 500): no provider is answering, so it counts toward the circuit breaker.
            return self._connection_failed(html_detail(self._redact(str(exc))), "HTML, not JSON: a proxy or a "
                                           "wrong --api-base?")
        self._unreachable = 0  # the endpoint answered, if with an error
        if isinstance(exc, litellm.BadRequestError) or (status is not None and 400 <= status < 500 and status != 408):
            # Once requests have worked, a refused one is about its items: isolate them. Before that it is
            # most likely the setup (a parameter the server rejects): do not multiply the requests.
            return RequestFailed("isolate" if self._replies else "fatal", f"{name}: {detail}")
        return RequestFailed("transient", f"{name}{f' {status}' if status else ''}: {detail}")

    def stop(self, reason: str, note: str) -> None:
        """No further request of the run is sent, and the streams in flight are given up (``in_flight``): each
        ends with ``reason``, and the run's notes say ``note`` once (the judge found out that no request can
        work: ``format_breaker``)."""
        if self.fatal is not None:
            return
        self.fatal = reason
        self._stats.notes.append(note)
        self._streams.give_up()

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
