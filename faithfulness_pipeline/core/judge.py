"""The judge port: the one narrow interface between the scoring core and any model.

A judge receives many items at once and returns exactly one result per item, in the same order.
How it groups items into requests (packing), limits, retries and caches them is its own business;
the core only sees per-item results. A failure is a per-item result with ``error`` set, never an
exception that loses the other items, and never a made-up value.

Implementations: ``judges.offline.OfflineJudge`` (deterministic, no network),
``judges.litellm_judge.LiteLLMJudge`` (the product) and the scripted fakes of the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    import polars as pl

Verdict = Literal["supported", "contradicted", "unsupported"]
VERDICTS: tuple[Verdict, ...] = ("supported", "contradicted", "unsupported")

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
    id: str
    claims: tuple[str, ...] | None  # None exactly when ``error`` is set
    error: str | None = None
    usage: Usage = NO_USAGE
    cached: bool = False  # served from a result store: no request was sent for it in this run


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
    id: str
    verdicts: tuple[ClaimVerdict, ...] | None  # one per claim, in claim order; None iff error
    error: str | None = None
    usage: Usage = NO_USAGE
    cached: bool = False
    context_truncated: bool = False  # the context alone exceeded the model window and was cut


@dataclass(slots=True)
class JudgeStats:
    """Totals of what a judge actually sent in this process (cache hits cost nothing)."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    cached_items: int = 0
    failed_items: int = 0
    retries: int = 0
    notes: list[str] = field(default_factory=list)


@runtime_checkable
class Judge(Protocol):
    """Extracts claims from answers and judges claims against contexts, many items per call."""

    #: recorded in the ``judge_model`` column (e.g. ``openai/gpt-4o-mini`` or ``offline-lexical-v1``)
    model_name: str
    #: recorded in the ``prompt_version`` column; changes whenever the judging instructions change
    prompt_version: str

    async def extract_claims(
        self, items: Sequence[ExtractItem], progress: ProgressCallback | None = None
    ) -> list[ExtractResult]:
        """Return one result per item, in input order."""
        ...

    async def judge_claims(
        self, items: Sequence[VerdictItem], progress: ProgressCallback | None = None
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

    The pipeline then splits a chunk's extraction into calls of ``overlap_rows`` answers and sends each
    call's verdicts as soon as its claims are back, while the next chunk's calls already start: request
    slots are not left idle at step and chunk boundaries.
    """

    @property
    def overlap_rows(self) -> int: ...


@runtime_checkable
class StoredColumns(Protocol):
    """A judge that can answer whole columns from a result store at once (a warm re-run).

    Each method returns one row per input row, or None when it has nothing to look in. A null
    ``claims`` / ``verdicts`` means "not stored": the pipeline asks for that item the per-item way.
    ``stored_claims`` gives ``claims`` (list of str) and the usage columns; ``stored_verdicts`` gives
    ``verdicts`` (the raw verdict structs, one per claim), ``context_truncated`` and the usage columns.
    The pipeline serves a row this way only when both its claims and its verdicts are stored, so
    ``stored_verdicts`` counts each of its hits as two cached step results and ``stored_claims`` counts
    none: rows it finds that are not served go through the per-item port, which counts them there.
    """

    def stored_claims(self, answers: pl.Series, questions: pl.Series) -> pl.DataFrame | None: ...

    def stored_verdicts(self, claims: pl.Series, contexts: pl.Series) -> pl.DataFrame | None: ...


@runtime_checkable
class StoredRows(Protocol):
    """A judge whose store also keeps each finished row whole: one lookup a row on a warm re-run.

    ``stored_rows`` gives, for each row (non-blank answer), the columns ``claims``, ``verdicts``,
    ``context_truncated`` and the usage columns prefixed ``x_`` (extraction) and ``v_`` (verdicts), with
    a null ``verdicts`` where the row is not stored (then the pipeline goes step by step, through
    :class:`StoredColumns` and the per-item port); None when it has nothing to look in. It counts each
    hit as two cached step results. ``store_rows`` keeps rows that have both steps done, given with the
    same columns; it never raises (a failed write only means a later run takes the longer way).
    """

    def stored_rows(self, answers: pl.Series, questions: pl.Series, contexts: pl.Series) -> pl.DataFrame | None: ...

    def store_rows(
        self, answers: pl.Series, questions: pl.Series, contexts: pl.Series, results: pl.DataFrame
    ) -> None: ...
