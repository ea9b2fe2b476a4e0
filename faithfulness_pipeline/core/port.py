"""The judge port: the one narrow interface between the scoring core and any model.

A judge receives many items at once and returns exactly one result per item, in the same order.
How it groups items into requests (packing), limits, retries and caches them is its own business;
the core only sees per-item results. A failure is a per-item result with ``error`` set, never an
exception that loses the other items, and never a made-up value.

Implementations: ``judges.offline.OfflineJudge`` (deterministic, no network),
``judges.litellm_judge.LiteLLMJudge`` (the product) and the scripted fakes of the tests. Capabilities that
any judge can use (the result store) wrap a judge and are judges themselves (``judges.stored``); the core
knows nothing of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Literal, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    import polars as pl

Verdict = Literal["supported", "contradicted", "unsupported"]
VERDICTS: tuple[Verdict, ...] = ("supported", "contradicted", "unsupported")

#: Where a result came from: sent to an LLM in this run, read from the result store, copied from an
#: identical item of this run, made by the offline judge, or needing no judge at all (nothing to judge).
ResultSource = Literal["llm", "store", "duplicate", "offline", "none"]

#: Called with the number of items that just finished (successfully or not), for progress bars.
ProgressCallback = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class Usage:
    """What producing one item's result cost: its share of the packed requests it rode in.

    Token counts are integer shares (the shares of one request add up to the request's usage);
    ``llm_calls`` is a fractional share of requests. ``cost_usd`` is None when the price is unknown.
    """

    llm_calls: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0

    def __add__(self, other: Usage) -> Usage:
        cost = None if self.cost_usd is None or other.cost_usd is None else self.cost_usd + other.cost_usd
        return Usage(
            llm_calls=self.llm_calls + other.llm_calls,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost_usd=cost,
        )


NO_USAGE = Usage()


@dataclass(frozen=True, slots=True)
class ExtractItem:
    """One answer whose claims are to be extracted. ``id`` is unique within one call."""

    id: str
    answer: str
    question: str | None = None


@dataclass(frozen=True, slots=True)
class ExtractResult:
    """``usage`` is what producing the result cost (in whichever run produced it); ``billed`` what this run
    paid for it (None: ``usage``, or nothing when ``cached``); ``source`` None: ``llm``, or ``store``
    when ``cached``. See :func:`billed_of` and :func:`source_of`."""

    id: str
    claims: tuple[str, ...] | None  # None exactly when ``error`` is set
    error: str | None = None
    usage: Usage = NO_USAGE
    cached: bool = False  # no request was sent for it in this run (a store hit, or a copy of one)
    source: ResultSource | None = None
    billed: Usage | None = None


@dataclass(frozen=True, slots=True)
class VerdictItem:
    """All claims of one answer, to be judged against its (non-empty) context."""

    id: str
    claims: tuple[str, ...]
    context: tuple[str, ...]
    question: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimVerdict:
    verdict: Verdict
    speculative: bool = False
    reason: str | None = None  # required for contradicted / unsupported; optional for supported
    evidence: int | None = None  # index into the item's context passages, or None


@dataclass(frozen=True, slots=True)
class VerdictResult:
    """As :class:`ExtractResult`, with the verdicts of one item's claims."""

    id: str
    verdicts: tuple[ClaimVerdict, ...] | None  # one per claim, in claim order; None iff error
    error: str | None = None
    usage: Usage = NO_USAGE
    cached: bool = False
    context_truncated: bool = False  # the context alone exceeded the model window and was cut
    source: ResultSource | None = None
    billed: Usage | None = None


def billed_of(result: ExtractResult | VerdictResult) -> Usage:
    """What this run paid for ``result``: its share of the requests sent in this run (failed ones too)."""
    if result.billed is not None:
        return result.billed
    return NO_USAGE if result.cached else result.usage


def source_of(result: ExtractResult | VerdictResult) -> ResultSource:
    if result.source is not None:
        return result.source
    return "store" if result.cached else "llm"


@dataclass(slots=True)
class JudgeStats:
    """Totals of what a judge actually sent in this process (cache hits cost nothing)."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    cached_items: int = 0  # results served from a result store
    duplicate_items: int = 0  # results copied from an identical item of the same run
    failed_items: int = 0
    retries: int = 0
    notes: list[str] = field(default_factory=list)


R = TypeVar("R", ExtractResult, VerdictResult)


@dataclass(frozen=True, slots=True)
class Hooks(Generic[R]):
    """What the caller of one port call wants to hear while the call runs. Every hook is optional, and a
    judge that cannot use one (it sends no requests, or answers everything at once) may ignore it.

    - ``progress(n)``: ``n`` more items are finished (successfully or not);
    - ``settled(results)``: these results just validated, before the call returns (a wrapper stores them
      at once, so a crash loses only what is in flight);
    - ``recheck(ids)``: asked right before a request for these items leaves; returns the results of those
      that became available meanwhile (another process stored them), which the judge then need not ask.
    """

    progress: ProgressCallback | None = None
    settled: Callable[[Sequence[R]], None] | None = None
    recheck: Callable[[Sequence[str]], Mapping[str, R]] | None = None

    def tick(self, n: int) -> None:
        if self.progress is not None and n > 0:
            self.progress(n)


@runtime_checkable
class Judge(Protocol):
    """Extracts claims from answers and judges claims against contexts, many items per call."""

    #: recorded in the ``judge_model`` column (e.g. ``openai/gpt-4o-mini`` or ``offline-lexical-v1``)
    model_name: str
    #: recorded in the ``prompt_version`` column; changes whenever the judging instructions change
    prompt_version: str

    async def extract_claims(
        self, items: Sequence[ExtractItem], hooks: Hooks[ExtractResult] | None = None
    ) -> list[ExtractResult]:
        """Return one result per item, in input order."""
        ...

    async def judge_claims(
        self, items: Sequence[VerdictItem], hooks: Hooks[VerdictResult] | None = None
    ) -> list[VerdictResult]:
        """Return one result per item, in input order, each with exactly one verdict per claim."""
        ...

    def stats(self) -> JudgeStats:
        """What this judge has spent so far in this process."""
        ...

    async def aclose(self) -> None:
        """Release network clients and stores. Called once at the end of every async run."""
        ...




# Optional capabilities. The pipeline uses them when a judge has them; every judge works without.


@runtime_checkable
class Overlapping(Protocol):
    """A judge whose calls wait on requests (not CPU) and may run concurrently, sharing its limits.

    With an ``overlap_rows`` (not None) the pipeline splits a chunk's extraction into calls of that many
    answers and sends each call's verdicts as soon as its claims are back, while the next chunk's calls
    already start: request slots are not left idle at step and chunk boundaries.
    """

    @property
    def overlap_rows(self) -> int | None: ...


@runtime_checkable
class RowJudge(Protocol):
    """A judge that takes a chunk's rows as columns (``core.flow.ROW_COLUMNS``) and returns their result
    columns (``core.flow.RESULT_COLUMNS``), in any row order, instead of being called item by item.

    It may answer some rows without the port (a wrapper that holds results does) and runs the core's own
    flow (``core.flow.judge_rows``) for the others.
    """

    async def judge_rows(self, rows: pl.DataFrame, progress: Callable[[float], None] | None) -> pl.DataFrame: ...


@runtime_checkable
class Prepaying(Protocol):
    """A judge that obtains a whole run's results in bulk before the run is scored (provider batch jobs).

    ``prepay`` is given a way to read the run's rows (:data:`core.flow.ROW_COLUMNS` frames, chunk by chunk,
    as often as it needs: claims must be back before verdicts can be asked) and returns when the results
    it could obtain are kept; the scoring pass that follows finds them. A judge without it is simply
    asked during the scoring pass.
    """

    async def prepay(self, chunks: Callable[[], Iterable[pl.DataFrame]]) -> None: ...

