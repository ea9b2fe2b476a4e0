"""The offline judge: a deterministic lexical baseline that needs no network and no API key.

Claims are the sentences of the answer, minus questions, pleasantries, lead-ins ("Here is a
summary:") and sentences without any content word. Each claim is judged by the share of its
content (English word stems, Han characters and bigrams, Hangul word stems and bigrams; see
``offline_text``) that the best-matching passage contains, by whether its numbers appear in the
context, and by whether its negation agrees with the closest context sentence:

* supported: coverage reaches the bar of the claim's script (``SUPPORT_COVERAGE`` for words,
  ``HAN_SUPPORT_COVERAGE``, ``HANGUL_SUPPORT_COVERAGE``), every number is in the context (round
  numbers may approximate), no absolute quantifier ("only", "always", 只有, 모든) is added, and
  the closest sentence agrees on negation;
* contradicted: the claim largely matches one context sentence (``CONFLICT_COVERAGE``) whose
  number differs from the claim's (a year from a year, a count from a count), or it matches that
  sentence well enough to be supported but one of the two is negated and the other is not;
* unsupported: everything else, including every claim when the context is empty.

It sees no paraphrase, synonym or inference: it is a baseline, named as such in ``judge_model``,
and its agreement with human labels is published by ``bench/offline_agreement.py``.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import TypeVar

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.port import (
    ClaimVerdict,
    ExtractItem,
    ExtractResult,
    Hooks,
    JudgeStats,
    ProgressCallback,
    ResultScope,
    Verdict,
    VerdictItem,
    VerdictResult,
)
from faithfulness_pipeline.judging.offline.text import (
    Features,
    Haystack,
    Sentences,
    absolutes,
    cjk_may_negate,
    features,
    has_content,
    is_lead_in,
    is_pleasantry,
    is_question,
    may_approximate,
    missing_terms,
    negated,
    negated_sentences,
    number_matches,
    passage_content,
    sentence_index,
    split_sentences,
)

OFFLINE_MODEL_NAME = "offline-lexical-v1"
#: Bump whenever the algorithm or its constants change: stored results are keyed by it.
OFFLINE_PROMPT_VERSION = "offline-lexical-1"
#: What a run scored by this judge says about it (CLI summary, calibrate, the Dagster check and the demo):
#: it is the fallback when no model is set, and its agreement with people is a baseline, not the product's.
OFFLINE_FALLBACK_NOTE = (
    "scored by the offline baseline judge (lexical rules, no LLM) because no model is set (--model / "
    "FP_JUDGE_MODEL); it agrees with human labels only as a baseline (balanced accuracy about 0.6 on rows its "
    "rules were not fitted to; README, 'The offline baseline'): set a model for the product's scores"
)

#: Share of a claim's weighted content units the best passage must contain to support it (words).
SUPPORT_COVERAGE = 0.7
#: The same for Han and Hangul units: character bigrams miss more of a faithful paraphrase than
#: words do. All three bars were chosen on datasets/dev (see bench/results/offline_agreement.md).
HAN_SUPPORT_COVERAGE = 0.4
HANGUL_SUPPORT_COVERAGE = 0.6
#: Share of a claim one context sentence must hold before a different number there is a conflict
#: rather than a different topic.
CONFLICT_COVERAGE = 0.5
#: Items handled between progress reports and event-loop yields; also the piece of a batch that
#: one process judges at a time when several share it.
_CHUNK = 256
#: Batches up to this many items are cut in pieces of ``_CHUNK``; larger ones in pieces that shrink
#: to ``_MIN_PIECE`` items where the workers' end and this process's end meet (see ``_piece``).
_FIXED_PIECES_UP_TO = 4 * _CHUNK
_MIN_PIECE = 32


# --------------------------------------------------------------------------- claims


def extract_claims(answer: str | None) -> tuple[str, ...]:
    """The answer's claims: its sentences, without questions, pleasantries, lead-ins and
    sentences that hold no content word or number ("OK.", "!!!")."""
    if not answer or answer.isspace():
        return ()
    claims: list[str] = []
    for sentence in split_sentences(answer):
        if is_question(sentence) or is_pleasantry(sentence) or is_lead_in(sentence):
            continue
        if has_content(sentence):
            claims.append(sentence)
    return tuple(claims)


# --------------------------------------------------------------------------- context


@dataclass(slots=True)
class _Passage:
    index: int  # in the item's context (blank passages are skipped but keep their place)
    text: str
    haystack: Haystack
    numbers: tuple[float, ...]
    _may_negate: bool | None = None
    _sentences: Sentences | None = None
    _negated: dict[int, bool] = field(default_factory=dict)
    _negated_haystacks: list[Haystack] | None = None
    _absolutes: frozenset[str] | None = None

    @classmethod
    def of(cls, index: int, text: str) -> _Passage:
        haystack, numbers, latin_negation = passage_content(text)
        return cls(index, text, haystack, numbers, True if latin_negation else None)

    @property
    def may_negate(self) -> bool:
        """Whether the passage may contain a negation (a cheap over-approximation)."""
        # The Chinese and Korean scans are left until a claim nearly supported by this passage asks.
        if self._may_negate is None:
            self._may_negate = cjk_may_negate(self.text)
        return self._may_negate

    @property
    def sentences(self) -> Sentences:
        # Only a claim that nearly matches this passage and has a negation or number to check
        # needs the sentence level: built on demand, once.
        if self._sentences is None:
            self._sentences = sentence_index(self.text)
        return self._sentences

    def negated_haystacks(self) -> list[Haystack]:
        """The passage's negated sentences: a cheap first look before ``sentences``."""
        if self._negated_haystacks is None:
            self._negated_haystacks = (
                [passage_content(s)[0] for s in negated_sentences(self.text)]
                if self.may_negate
                else []
            )
        return self._negated_haystacks

    def negated(self, i: int) -> bool:
        found = self._negated.get(i)
        if found is None:
            found = self._negated[i] = negated(self.sentences.parts[i])
        return found

    def absolutes(self) -> frozenset[str]:
        if self._absolutes is None:
            self._absolutes = absolutes(self.text)
        return self._absolutes


@dataclass(slots=True)
class _Context:
    """An item's passages, parsed once for all of its claims."""

    passages: list[_Passage]
    numbers: tuple[float, ...]
    number_set: frozenset[float]

    @classmethod
    def of(cls, context: Sequence[str]) -> _Context:
        passages = [_Passage.of(i, text) for i, text in enumerate(context) if text and not text.isspace()]
        numbers = tuple(x for p in passages for x in p.numbers)
        return cls(passages, numbers, frozenset(numbers))

    def missing(self, claimed: Sequence[float]) -> list[float]:
        """The claimed numbers the context does not state (``number_matches`` none of its numbers)."""
        return [
            x
            for x in claimed
            if x not in self.number_set
            and not (may_approximate(x) and any(number_matches(x, y) for y in self.numbers))
        ]


# --------------------------------------------------------------------------- verdicts


def judge_claims(claims: Sequence[str], context: Sequence[str]) -> tuple[ClaimVerdict, ...]:
    """One verdict per claim, in order, against the context passages (``evidence`` indexes them)."""
    ctx = _Context.of(context)
    return tuple(_judge_one(claim, ctx) for claim in claims)


def _judge_one(claim: str, ctx: _Context) -> ClaimVerdict:
    feats = features(claim)
    hedged = feats.hedged
    if not ctx.passages:
        return ClaimVerdict("unsupported", hedged, "The context is empty.", None)
    claimed_numbers = feats.numbers
    total = feats.total
    if total == 0.0 and not claimed_numbers:
        return ClaimVerdict("unsupported", hedged, "The claim has no content to check.", None)

    best, best_cov = ctx.passages[0], 1.0  # a bare number ("42.") is decided by the number check alone
    if total:
        best_cov = -1.0
        for p in ctx.passages:
            cov = _coverage(feats, total, p.haystack)
            if cov > best_cov:
                best, best_cov = p, cov
                if cov >= 1.0:
                    break  # every unit found: no later passage can cover more (a copied sentence)
    best_i = best.index
    missing = ctx.missing(claimed_numbers)
    bar = _support_bar(feats, total)

    # A bare number ("42.") has no words to find its sentence by: it is only looked up.
    look_closer = bool(total) and best_cov >= CONFLICT_COVERAGE
    if look_closer and _worth_a_closer_look(feats, total, best, bar, best_cov, missing):
        si, sentence_cov = _closest_sentence(feats, total, best)
        if si is not None and sentence_cov >= CONFLICT_COVERAGE:
            # A negation decides only when that one sentence carries the claim: long passages have
            # unrelated "not"s in sentences that merely share a few words with it.
            if sentence_cov >= bar and (feats.negations > 0) != best.negated(si):
                reason = (
                    f"The claim negates what passage {best_i} states."
                    if feats.negations
                    else f"Passage {best_i} negates what the claim states."
                )
                return ClaimVerdict("contradicted", hedged, reason, best_i)
            conflicting = [y for y in best.sentences.numbers(si) if any(_same_kind(x, y) for x in missing)]
            if conflicting:
                stated = ", ".join(_fmt(y) for y in conflicting[:3])
                reason = f"The claim says {_fmt(missing[0])} where passage {best_i} says {stated}."
                return ClaimVerdict("contradicted", hedged, reason, best_i)

    added = feats.absolutes - best.absolutes() if feats.absolutes else frozenset()
    if best_cov >= bar and not missing and not added:
        return ClaimVerdict("supported", hedged, None, best_i)

    if missing and best_cov >= bar:
        reason = f"The context does not state the number {_fmt(missing[0])}."
    elif added and best_cov >= bar:
        reason = f"The context does not say '{sorted(added)[0]}'."
    else:
        absent = missing_terms(claim, best.haystack)
        reason = (
            "The context does not mention " + ", ".join(absent[:3]) + "."
            if absent
            else "The context does not state this."
        )
    return ClaimVerdict("unsupported", hedged, reason, best_i if best_cov > 0.0 else None)


def _worth_a_closer_look(
    feats: Features,
    total: float,
    passage: _Passage,
    bar: float,
    coverage: float,
    missing: list[float],
) -> bool:
    """Whether the sentence level could turn this claim into a contradiction (it usually cannot,
    and the sentence level is the judge's most expensive step)."""
    if missing and passage.numbers:
        return True
    if coverage < bar or not (feats.negations or passage.may_negate):
        return False
    # Negations disagree only if a negated sentence carries a positive claim, or none carries a
    # negated one.
    negated_match = any(_coverage(feats, total, h) >= bar for h in passage.negated_haystacks())
    return negated_match != (feats.negations > 0)


def _coverage(feats: Features, total: float, against: Haystack) -> float:
    # Weights are halves and ones: their sums are exact in any order.
    return against.weight(feats) / total if total else 0.0


def _support_bar(feats: Features, total: float) -> float:
    """The coverage a claim needs: the bars of its units' scripts, weighted by their share."""
    if total == 0.0:
        return SUPPORT_COVERAGE
    latin = total - feats.han_weight - feats.hangul_weight
    return (
        latin * SUPPORT_COVERAGE
        + feats.han_weight * HAN_SUPPORT_COVERAGE
        + feats.hangul_weight * HANGUL_SUPPORT_COVERAGE
    ) / total


def _closest_sentence(feats: Features, total: float, passage: _Passage) -> tuple[int | None, float]:
    """The first sentence of the passage that covers most of the claim, and its coverage."""
    best: int | None = None
    best_cov = -1.0
    weights = passage.sentences.weights(feats) if total else [total] * len(passage.sentences.parts)
    for i, weight in enumerate(weights):
        cov = weight / total if total else 1.0
        if cov > best_cov:
            best, best_cov = i, cov
    return best, best_cov


def _same_kind(a: float, b: float) -> bool:
    """Years conflict with years and other numbers with other numbers ("in 2019" vs "3 frames")."""
    return _is_year(a) == _is_year(b)


def _is_year(x: float) -> bool:
    return x == int(x) and 1000 <= x <= 2100


def _fmt(x: float) -> str:
    return str(int(x)) if x == int(x) else f"{x:g}"


# --------------------------------------------------------------------------- the Judge


#: Environment variable: how many processes (this one included) judge a large batch of claims.
PROCESSES_ENV = "FAITHFULNESS_OFFLINE_PROCESSES"
#: A batch with fewer items is done in this process alone: a worker process costs about a second
#: to start (it imports the package), which only a large batch repays.
PARALLEL_MIN_ITEMS = 2000
#: At most this many processes by default; the judge is CPU-bound, so more than the cores is waste.
_MAX_DEFAULT_PROCESSES = 4

#: A verdict as it crosses a process boundary: plain tuples pickle several times faster.
_WireVerdict = tuple[Verdict, bool, str | None, int | None]


def default_processes() -> int:
    """``FAITHFULNESS_OFFLINE_PROCESSES`` if set, else the usable cores (at most 4)."""
    raw = os.environ.get(PROCESSES_ENV, "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(f"{PROCESSES_ENV} must be a whole number of processes, got {raw!r}") from None
        if value < 1:
            raise ConfigError(f"{PROCESSES_ENV} must be at least 1, got {value}")
        return value
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, _MAX_DEFAULT_PROCESSES))


_Work = TypeVar("_Work")
_Wire = TypeVar("_Wire")
_Result = TypeVar("_Result")
#: One verdict item as it is sent to a worker: (claims, context).
_VerdictWork = tuple[tuple[str, ...], tuple[str, ...]]


def _judge_item(work: _VerdictWork) -> tuple[ClaimVerdict, ...]:
    return judge_claims(*work)


def _judge_in_worker(work: list[_VerdictWork]) -> list[tuple[_WireVerdict, ...]]:
    return [
        tuple((v.verdict, v.speculative, v.reason, v.evidence) for v in judge_claims(claims, context))
        for claims, context in work
    ]


def _from_wire(judged: list[tuple[_WireVerdict, ...]]) -> list[tuple[ClaimVerdict, ...]]:
    return [tuple(ClaimVerdict(*v) for v in verdicts) for verdicts in judged]


def _extract_in_worker(answers: list[str]) -> list[tuple[str, ...]]:
    return [extract_claims(answer) for answer in answers]


class OfflineJudge:
    """Deterministic lexical judge (implements :class:`~faithfulness_pipeline.core.port.Judge`).

    It costs nothing: every result carries zero usage and the stats stay at zero requests.
    The judgement of an item depends on that item alone, so results can be cached per item, and a
    large batch can be split across processes without changing any result: with ``processes`` > 1
    (default: :func:`default_processes`), batches of at least ``parallel_min_items`` verdict items
    are shared between this process and ``processes - 1`` worker processes, and every result is put
    back in its item's place; claim extraction is shared the same way.

    Workers start from a fork server and import the package; like every multiprocessing program,
    a script that scores large tables this way needs an ``if __name__ == "__main__":`` guard (the
    workers import the main module). ``FAITHFULNESS_OFFLINE_PROCESSES=1`` keeps everything in one
    process. If a worker dies, its pieces and all later ones are judged in this process.
    """

    model_name: str = OFFLINE_MODEL_NAME
    prompt_version: str = OFFLINE_PROMPT_VERSION

    def __init__(self, processes: int | None = None, parallel_min_items: int = PARALLEL_MIN_ITEMS) -> None:
        self._stats = JudgeStats()
        self._processes = default_processes() if processes is None else processes
        if self._processes < 1:
            raise ConfigError(f"processes must be at least 1, got {self._processes}")
        self._parallel_min_items = parallel_min_items
        self._pool: ProcessPoolExecutor | None = None
        self._pool_failed = False
        self._worker_pieces = 0

    @property
    def processes(self) -> int:
        """How many processes (this one included) share a large batch of verdict items."""
        return self._processes

    @property
    def worker_pieces(self) -> int:
        """How many pieces (of up to 256 items) worker processes have done so far."""
        return self._worker_pieces

    def _pool_for(self, n_items: int) -> ProcessPoolExecutor | None:
        if self._processes < 2 or self._pool_failed or n_items < self._parallel_min_items:
            return None
        if self._pool is None:
            # forkserver: workers start from a clean process, not a fork of this one (which may hold
            # polars' threads and locks).
            method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
            self._pool = ProcessPoolExecutor(
                max_workers=self._processes - 1, mp_context=multiprocessing.get_context(method)
            )
            weakref.finalize(self, self._pool.shutdown, wait=False, cancel_futures=True)
        return self._pool

    def _drop_pool(self) -> None:
        """After a worker failure every piece is judged here: same results, only slower."""
        self._pool_failed = True
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    async def extract_claims(
        self, items: Sequence[ExtractItem], hooks: Hooks[ExtractResult] | None = None
    ) -> list[ExtractResult]:
        progress = hooks.progress if hooks is not None else None
        claims = await self._share([it.answer for it in items], extract_claims, _extract_in_worker, list, progress)
        return [ExtractResult(it.id, found, source="offline") for it, found in zip(items, claims, strict=True)]

    async def judge_claims(
        self, items: Sequence[VerdictItem], hooks: Hooks[VerdictResult] | None = None
    ) -> list[VerdictResult]:
        work = [(it.claims, it.context) for it in items]
        progress = hooks.progress if hooks is not None else None
        verdicts = await self._share(work, _judge_item, _judge_in_worker, _from_wire, progress)
        return [VerdictResult(id=it.id, verdicts=v, source="offline") for it, v in zip(items, verdicts, strict=True)]

    def result_scope(self) -> ResultScope:
        """Its results depend on the item and the algorithm's version alone."""
        return ResultScope(
            extract=("extract", OFFLINE_MODEL_NAME, OFFLINE_PROMPT_VERSION),
            verdict=("verdict", OFFLINE_MODEL_NAME, OFFLINE_PROMPT_VERSION),
            row=("row", OFFLINE_MODEL_NAME, OFFLINE_PROMPT_VERSION),
        )

    async def _share(
        self,
        work: list[_Work],
        here: Callable[[_Work], _Result],
        there: Callable[[list[_Work]], list[_Wire]],
        received: Callable[[list[_Wire]], list[_Result]],
        progress: ProgressCallback | None,
    ) -> list[_Result]:
        """``[here(w) for w in work]``, in pieces; with workers, they do ``there`` on pieces from the
        front while this process works from the back, so neither waits for the other."""
        total = len(work)
        done: dict[int, list[_Result]] = {}  # by the piece's first item
        running: dict[int, tuple[int, Future[list[_Wire]]]] = {}  # first item -> (end, future)
        depth = 2 * (self._processes - 1)  # pieces queued per worker: it never waits for this process
        front, back = 0, total
        while front < back or running:
            pool = self._pool_for(total)
            while pool is not None and front < back and len(running) < depth:
                end = front + self._piece(back - front, total, shared=True)
                try:
                    running[front] = (end, pool.submit(there, work[front:end]))
                except (BrokenProcessPool, RuntimeError):
                    self._drop_pool()
                    break
                front = end
            if front < back:
                start = back - self._piece(back - front, total, shared=self._pool is not None)
                done[start] = [here(w) for w in work[start:back]]
                await _report(progress, back - start)
                back = start
            elif running:
                futures = [asyncio.wrap_future(f) for _, f in running.values()]
                await asyncio.wait(futures, return_when=FIRST_COMPLETED)
            for start in [i for i, (_, f) in running.items() if f.done()]:
                end, future = running.pop(start)
                if not future.cancelled() and future.exception() is None:
                    done[start] = received(future.result())
                    self._worker_pieces += 1
                else:
                    # A worker died (killed, out of memory), a piece could not be sent, or the judge
                    # has a bug: the piece is done here, where a bug raises as it would without
                    # workers, and so is every piece after it.
                    self._drop_pool()
                    done[start] = [here(w) for w in work[start:end]]
                await _report(progress, end - start)
            if self._pool is None and running:
                for start in list(running):  # pieces a dropped pool still held
                    end, future = running.pop(start)
                    future.cancel()
                    done[start] = [here(w) for w in work[start:end]]
                    await _report(progress, end - start)
        return [result for start in sorted(done) for result in done[start]]

    def _piece(self, left: int, total: int, *, shared: bool) -> int:
        """How many of the ``left`` items not yet given out the next piece takes.

        A large batch shared with workers is cut finer as its two ends meet: whoever finishes first
        then waits for at most a few small pieces, not for two full ones (with typical RAG rows a
        full piece is a tenth of a second of one core, and a pipeline chunk makes two batches).
        """
        if not shared or total <= _FIXED_PIECES_UP_TO:
            return min(_CHUNK, left)
        return min(left, max(_MIN_PIECE, min(_CHUNK, left // (2 * self._processes))))

    def stats(self) -> JudgeStats:
        return self._stats

    async def aclose(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)




async def _report(progress: ProgressCallback | None, n: int) -> None:
    if progress is not None:
        progress(n)
    await asyncio.sleep(0)  # let other tasks (progress bars, a concurrent step) run between chunks
