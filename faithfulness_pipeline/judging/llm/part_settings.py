"""What each part of the litellm judge reads of the judge's settings, cut from ``JudgeSettings`` here alone.

The judges (``judge.LiteLLMJudge``, ``batch.judge.BatchJudge``) are built from the whole settings; the parts
they put together (the model card, the limiter, the sender, a request's body, the batch rounds) take only
their slice, so a part's signature says what it depends on and a defaulted field is resolved once, here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from faithfulness_pipeline.settings.judge import JudgeSettings


@dataclass(frozen=True, slots=True)
class CardSettings:
    """What the settings say of the model beside litellm's map (``card.model_card``): the window, output limit,
    answers per request and prices set by hand (None: not set), whether replies are held to the JSON schema and
    streamed, and the server of one's own or proxy the requests go to (None: the provider's own endpoint)."""

    context_window: int | None
    max_output_tokens: int | None
    max_items_per_pack: int | None
    input_cost_per_token: float | None
    output_cost_per_token: float | None
    cached_input_cost_per_token: float | None
    use_json_schema: Literal["auto", "yes", "no"]
    stream: Literal["auto", "yes", "no"]
    api_base: str | None

    @classmethod
    def of(cls, settings: JudgeSettings) -> CardSettings:
        return cls(
            context_window=settings.context_window,
            max_output_tokens=settings.max_output_tokens,
            max_items_per_pack=settings.max_items_per_pack,
            input_cost_per_token=settings.input_cost_per_token,
            output_cost_per_token=settings.output_cost_per_token,
            cached_input_cost_per_token=settings.cached_input_cost_per_token,
            use_json_schema=settings.use_json_schema,
            stream=settings.stream,
            api_base=settings.api_base,
        )


@dataclass(frozen=True, slots=True)
class RateLimits:
    """The limits of the judge's one request limiter (``limits.RequestLimiter``): requests in flight, per minute
    and tokens per minute (None: no limit), and the back-off pauses after a failure, in seconds."""

    max_concurrency: int
    rpm: int | None
    tpm: int | None
    backoff_base_s: float
    backoff_max_s: float  # never below backoff_base_s

    @classmethod
    def of(cls, settings: JudgeSettings) -> RateLimits:
        return cls(settings.max_concurrency, settings.rpm, settings.tpm, settings.backoff_base_s,
                   _longest_pause_s(settings))


@dataclass(frozen=True, slots=True)
class Sampling:
    """How the model samples its reply (``chat.chat_body``); part of what a result is kept under."""

    temperature: float
    seed: int | None  # None: the provider's own choice

    @classmethod
    def of(cls, settings: JudgeSettings) -> Sampling:
        return cls(settings.temperature, settings.seed)


@dataclass(frozen=True, slots=True)
class RequestSettings:
    """What the sender (``requests.Sender``) reads: the model and where it is served, a request's bounds in
    seconds (``timeout_s`` whole or between a stream's pieces, ``stream_max_s`` a streamed one in all), the
    longest Retry-After waited out, and the sampling its body carries."""

    model: str
    api_base: str | None
    timeout_s: float
    stream_max_s: float
    retry_after_max_s: float
    sampling: Sampling

    @classmethod
    def of(cls, settings: JudgeSettings) -> RequestSettings:
        return cls(
            model=settings.model or "",
            api_base=settings.api_base,
            timeout_s=settings.timeout_s,
            stream_max_s=settings.stream_max_s,
            retry_after_max_s=(settings.retry_after_max_s if settings.retry_after_max_s is not None
                               else _longest_pause_s(settings)),
            sampling=Sampling.of(settings),
        )


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    """How the batch judge (``batch.judge.BatchJudge``) goes about its batches: how often an item is asked
    (``max_retries`` re-asks), where an item whose line failed is asked again, how long the run waits for its
    batches and the first pause between two looks at them, in seconds."""

    max_retries: int
    fallback: Literal["batch", "interactive"]
    max_wait_s: float
    poll_s: float

    @classmethod
    def of(cls, settings: JudgeSettings) -> BatchPolicy:
        return cls(settings.max_retries, settings.batch_fallback, settings.batch_max_wait_s, settings.batch_poll_s)


def _longest_pause_s(settings: JudgeSettings) -> float:
    """The longest back-off pause: ``backoff_max_s``, raised to ``backoff_base_s`` where it was set below it."""
    return max(settings.backoff_max_s, settings.backoff_base_s)
