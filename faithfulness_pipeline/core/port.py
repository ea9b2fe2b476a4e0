"""The port: everything the scoring core asks of the world outside it, and nothing else.

The core owns this interface and every judge implements it (ports and adapters: the port belongs to the
application, not to the adapters), so the core never imports a judge, and a new judge is one class.

- :class:`Judge`: many items in, exactly one result per item out, in the same order. How a judge groups
  items into requests (packing), limits, retries them is its own business; a failure is a per-item result
  with ``error`` set, never an exception that loses the other items, and never a made-up value.
- :class:`RowCache`: whole finished rows held outside the port (the result store), asked before the
  port and handed the rows the port finished: a stage of the core's flow, not a judge.
- :class:`Judging`: what a flow is given: the port, the row cache, how the port's calls may overlap.
- Three optional capabilities a judge may have, checked once where a judge is put together
  (``judging.stack``): :class:`Storable` (it names what changes its results, so they can be kept and
  shared), :class:`Overlapping` (its calls wait on requests and may run side by side) and
  :class:`Estimating` (it can price items without sending them: the dry run).

Implementations: ``judging.offline.judge.OfflineJudge`` (deterministic, no network),
``judging.llm.judge.LiteLLMJudge`` (the product), ``judging.llm.batch.judge.BatchJudge`` (provider batch
jobs) and the scripted judges of ``faithfulness_pipeline.testing``. What any judge can use (run memory,
the result store, leases) wraps a judge once, in ``judging``; the core knows nothing of it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Final, Generic, Literal, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    import polars as pl

Verdict = Literal["supported", "contradicted", "unsupported"]
VERDICTS: tuple[Verdict, ...] = ("supported", "contradicted", "unsupported")

#: Where a result came from: sent to an LLM in this run, read from the result store, copied from an
#: identical item of this run, made by the offline judge, needing no judge at all (nothing to judge), none
#: because the row is outside the run's sample (``core.sampling``), or none because the run's spend cap was
#: reached before its request could leave (``judging.budget``: such a result carries the reason as its error).
ResultSource = Literal["llm", "store", "duplicate", "offline", "none", "not_sampled", "skipped"]

#: Called with the number of items that just finished (successfully or not), for progress bars.
ProgressCallback = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class Usage:
    """What producing one item's result cost: its share of the packed requests it rode in.

    Token counts are integer shares (the shares of one request add up to the request's usage);
    ``llm_calls`` is a fractional share of requests. ``cost_usd`` is None when the price is unknown.
    ``cached_prompt_tokens`` is the part of ``prompt_tokens`` the provider served from its prompt cache (and
    charged at its cached price); last, so that the positional order of the older fields stays.
    """

    llm_calls: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    cached_prompt_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        cost = None if self.cost_usd is None or other.cost_usd is None else self.cost_usd + other.cost_usd
        return Usage(
            llm_calls=self.llm_calls + other.llm_calls,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost_usd=cost,
            cached_prompt_tokens=self.cached_prompt_tokens + other.cached_prompt_tokens,
        )


NO_USAGE = Usage()

#: The most of an error's text that a result (and a log line about one) keeps.
ERROR_CHARS: Final = 300


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
    cached_prompt_tokens: int = 0  # of prompt_tokens, served from the provider's prompt cache
    cached_items: int = 0  # results served from a result store
    duplicate_items: int = 0  # results copied from an identical item of the same run
    failed_items: int = 0
    retries: int = 0
    refused_usage: int = 0  # replies whose reported token counts could not be (billed by our own count)
    notes: list[str] = field(default_factory=list)

    def __add__(self, other: JudgeStats) -> JudgeStats:
        """Both judges' totals: the counts added, the cost unknown when either's is, each note once (in
        the order first seen). ``JudgeStats()`` adds nothing, so ``sum(stats, JudgeStats())`` is the total."""
        if not isinstance(other, JudgeStats):
            return NotImplemented
        # Every count is added by going over the fields, so a counter added later cannot be left out here.
        counts = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)
                  if f.name not in ("cost_usd", "notes")}  # fmt: skip
        cost = None if self.cost_usd is None or other.cost_usd is None else self.cost_usd + other.cost_usd
        return JudgeStats(**counts, cost_usd=cost, notes=list(dict.fromkeys([*self.notes, *other.notes])))

    def __radd__(self, other: object) -> JudgeStats:
        # ``sum(stats)`` starts from the integer 0.
        if other == 0:
            return self + JudgeStats()
        return NotImplemented


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


@dataclass(frozen=True, slots=True)
class ResultScope:
    """Everything besides an item's content that changes a judge's results, per step: the step name,
    prompt versions, model, endpoint and output-changing parameters. It goes into every result key, so a
    result is never served for settings that did not produce it. Timeouts, limits and packing stay out."""

    extract: tuple[str | None, ...]
    verdict: tuple[str | None, ...]
    row: tuple[str | None, ...]


@dataclass(frozen=True, slots=True)
class CostEstimate:
    """Requests, tokens and cost a run would spend (retries not included)."""

    requests: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    notes: list[str] = field(default_factory=list)
    cached_items: int = 0  # step results already in the result store: they cost nothing
    batch_cost_usd: float | None = None  # the same requests at the provider's batch prices (None: unknown)


# The three optional capabilities. Each is checked once, where a judge is put together; every judge works
# without them.


@runtime_checkable
class Storable(Protocol):
    """A judge whose results may be kept (run memory, result store): it names what changes them."""

    def result_scope(self) -> ResultScope: ...


@runtime_checkable
class Overlapping(Protocol):
    """A judge whose calls wait on requests (not CPU) and may run concurrently, sharing its limits.

    With an ``overlap_rows`` (not None) the flow splits a chunk's extraction into calls of that many
    answers and sends each call's verdicts as soon as its claims are back, while the next chunk's calls
    already start: request slots are not left idle at step and chunk boundaries.
    """

    @property
    def overlap_rows(self) -> int | None: ...


@runtime_checkable
class Estimating(Protocol):
    """A judge that can estimate the cost of items without sending them (the dry run)."""

    def estimate(self, extract: Sequence[ExtractItem], verdict: Sequence[VerdictItem]) -> CostEstimate:
        """What asking for these extraction and verdict items would cost. Verdict items may carry
        claims that are only a guess (the answer's sentences) where the claims are not extracted yet."""
        ...


@dataclass(frozen=True, slots=True)
class Capabilities:
    """Which optional capabilities a judge has, looked up once where it is put together: whatever runs it
    later reads these fields instead of asking the judge's type again."""

    #: what changes its results (None: it names nothing, so nothing of it may be kept)
    scope: ResultScope | None = None
    #: answers per extraction call when its calls overlap (None: they do not)
    overlap_rows: int | None = None
    #: the judge itself when it can price items unsent (None: it cannot)
    estimating: Estimating | None = None

    @staticmethod
    def of(judge: Judge) -> Capabilities:
        return Capabilities(
            scope=judge.result_scope() if isinstance(judge, Storable) else None,
            overlap_rows=judge.overlap_rows if isinstance(judge, Overlapping) else None,
            estimating=judge if isinstance(judge, Estimating) else None,
        )


class RowCache(Protocol):
    """Whole judged rows kept outside the port. The flow asks it for a chunk's rows before the port, and
    hands it the rows the port finished. Both run on a worker thread (they hash and look up)."""

    def find(self, rows: pl.DataFrame) -> pl.DataFrame | None:
        """The result columns (``core.flow.RESULT_COLUMNS``) of those of ``rows`` (``core.flow.ROW_COLUMNS``,
        no blank answers) that are kept whole, or None when there are none."""
        ...

    def keep(self, rows: pl.DataFrame, results: pl.DataFrame) -> None:
        """Keeps finished ``rows`` with their ``results`` (row for row); never raises."""
        ...


@dataclass(frozen=True, slots=True)
class Judging:
    """What a flow judges rows with: the port, the row cache in front of it (None: none), and how many
    answers go in one extraction call when calls overlap (None: one call per step and chunk, one chunk at
    a time: a judge that waits on its own CPU)."""

    judge: Judge
    rows: RowCache | None = None
    overlap_rows: int | None = None
    #: what shapes the judge's results (None: it names nothing); its hash goes into every scored row
    scope: ResultScope | None = None

    @staticmethod
    def of(judge: Judge | Judging) -> Judging:
        """``judge`` as a flow's :class:`Judging`: a bare judge gets no row cache, overlaps when it is
        :class:`Overlapping` and names its scope when it is :class:`Storable`."""
        if isinstance(judge, Judging):
            return judge
        found = Capabilities.of(judge)
        return Judging(judge, None, found.overlap_rows, found.scope)

    @property
    def settings_hash(self) -> str | None:
        """:func:`settings_hash` of the scope, None when the judge names none."""
        return None if self.scope is None else settings_hash(self.scope)


def settings_hash(scope: ResultScope) -> str:
    """16 hex digits of SHA-256 over the scope's fields: two scorings of one answer with equal hashes had the
    same prompts, model, endpoint and output-changing parameters (what the result store's keys cover too).
    No secret is in a scope, and a hash of one reveals nothing of it."""
    fields = json.dumps([scope.extract, scope.verdict, scope.row], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(fields.encode()).hexdigest()[:16]
