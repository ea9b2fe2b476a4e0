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
from collections.abc import Sequence
from dataclasses import dataclass, field

from faithfulness_pipeline.core.judge import (
    ClaimVerdict,
    ExtractItem,
    ExtractResult,
    JudgeStats,
    ProgressCallback,
    VerdictItem,
    VerdictResult,
)
from faithfulness_pipeline.judges.offline_text import (
    Features,
    Unit,
    absolutes,
    features,
    has_content,
    is_lead_in,
    is_pleasantry,
    is_question,
    missing_terms,
    negated,
    negated_sentences,
    number_matches,
    passage_units,
    sentence_units,
    split_sentences,
)

OFFLINE_MODEL_NAME = "offline-lexical-v1"
#: Bump whenever the algorithm or its constants change: stored results are keyed by it.
OFFLINE_PROMPT_VERSION = "offline-lexical-1"

#: Share of a claim's weighted content units the best passage must contain to support it (words).
SUPPORT_COVERAGE = 0.7
#: The same for Han and Hangul units: character bigrams miss more of a faithful paraphrase than
#: words do. All three bars were chosen on datasets/dev (see bench/results/offline_agreement.md).
HAN_SUPPORT_COVERAGE = 0.4
HANGUL_SUPPORT_COVERAGE = 0.6
#: Share of a claim one context sentence must hold before a different number there is a conflict
#: rather than a different topic.
CONFLICT_COVERAGE = 0.5
#: Items handled between progress reports and event-loop yields.
_CHUNK = 256


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


#: (text, units, numbers) of one context sentence
_Sentence = tuple[str, set[Unit], tuple[float, ...]]


@dataclass(slots=True)
class _Passage:
    index: int  # in the item's context (blank passages are skipped but keep their place)
    text: str
    units: set[Unit]
    numbers: tuple[float, ...]
    may_negate: bool
    _sentences: list[_Sentence] | None = None
    _negated: dict[int, bool] = field(default_factory=dict)
    _negated_units: list[set[Unit]] | None = None
    _absolutes: frozenset[str] | None = None

    @classmethod
    def of(cls, index: int, text: str) -> _Passage:
        return cls(index, text, *passage_units(text))

    @property
    def sentences(self) -> list[_Sentence]:
        # Only a claim that nearly matches this passage and has a negation or number to check
        # needs the sentence level: built on demand, once.
        if self._sentences is None:
            self._sentences = sentence_units(self.text)
        return self._sentences

    def negated_units(self) -> list[set[Unit]]:
        """Units of the passage's negated sentences: a cheap first look before ``sentences``."""
        if self._negated_units is None:
            self._negated_units = (
                [passage_units(s)[0] for s in negated_sentences(self.text)]
                if self.may_negate
                else []
            )
        return self._negated_units

    def negated(self, i: int) -> bool:
        found = self._negated.get(i)
        if found is None:
            found = self._negated[i] = negated(self.sentences[i][0])
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

    @classmethod
    def of(cls, context: Sequence[str]) -> _Context:
        passages = [_Passage.of(i, text) for i, text in enumerate(context) if text and not text.isspace()]
        return cls(passages, tuple(x for p in passages for x in p.numbers))


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
    units, claimed_numbers = feats.units, feats.numbers
    total = sum(units.values())
    if total == 0.0 and not claimed_numbers:
        return ClaimVerdict("unsupported", hedged, "The claim has no content to check.", None)

    best, best_cov = ctx.passages[0], 1.0  # a bare number ("42.") is decided by the number check alone
    if total:
        best_cov = -1.0
        for p in ctx.passages:
            cov = _coverage(units, total, p.units)
            if cov > best_cov:
                best, best_cov = p, cov
    best_i = best.index
    missing = [x for x in claimed_numbers if not any(number_matches(x, y) for y in ctx.numbers)]
    bar = _support_bar(feats, total)

    # A bare number ("42.") has no words to find its sentence by: it is only looked up.
    look_closer = bool(total) and best_cov >= CONFLICT_COVERAGE
    if look_closer and _worth_a_closer_look(feats, units, total, best, bar, best_cov, missing):
        si, sentence_cov = _closest_sentence(units, total, best)
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
            conflicting = [y for y in best.sentences[si][2] if any(_same_kind(x, y) for x in missing)]
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
        absent = missing_terms(claim, best.units)
        reason = (
            "The context does not mention " + ", ".join(absent[:3]) + "."
            if absent
            else "The context does not state this."
        )
    return ClaimVerdict("unsupported", hedged, reason, best_i if best_cov > 0.0 else None)


def _worth_a_closer_look(
    feats: Features,
    units: dict[Unit, float],
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
    negated_match = any(_coverage(units, total, u) >= bar for u in passage.negated_units())
    return negated_match != (feats.negations > 0)


def _coverage(units: dict[Unit, float], total: float, against: set[Unit]) -> float:
    if not total:
        return 0.0
    matched = against.intersection(units)
    return sum(map(units.__getitem__, matched)) / total


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


def _closest_sentence(units: dict[Unit, float], total: float, passage: _Passage) -> tuple[int | None, float]:
    best: int | None = None
    best_cov = -1.0
    for i, sentence in enumerate(passage.sentences):
        cov = _coverage(units, total, sentence[1]) if total else 1.0
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


class OfflineJudge:
    """Deterministic lexical judge (implements :class:`~faithfulness_pipeline.core.judge.Judge`).

    It costs nothing: every result carries zero usage and the stats stay at zero requests.
    The judgement of an item depends on that item alone, so results can be cached per item.
    """

    model_name: str = OFFLINE_MODEL_NAME
    prompt_version: str = OFFLINE_PROMPT_VERSION

    def __init__(self) -> None:
        self._stats = JudgeStats()

    async def extract_claims(
        self, items: Sequence[ExtractItem], progress: ProgressCallback | None = None
    ) -> list[ExtractResult]:
        out: list[ExtractResult] = []
        for start in range(0, len(items), _CHUNK):
            chunk = items[start : start + _CHUNK]
            out.extend(ExtractResult(id=it.id, claims=extract_claims(it.answer)) for it in chunk)
            await _report(progress, len(chunk))
        return out

    async def judge_claims(
        self, items: Sequence[VerdictItem], progress: ProgressCallback | None = None
    ) -> list[VerdictResult]:
        out: list[VerdictResult] = []
        for start in range(0, len(items), _CHUNK):
            chunk = items[start : start + _CHUNK]
            out.extend(VerdictResult(id=it.id, verdicts=judge_claims(it.claims, it.context)) for it in chunk)
            await _report(progress, len(chunk))
        return out

    def stats(self) -> JudgeStats:
        return self._stats

    async def aclose(self) -> None:
        return None


async def _report(progress: ProgressCallback | None, n: int) -> None:
    if progress is not None:
        progress(n)
    await asyncio.sleep(0)  # let other tasks (progress bars, a concurrent step) run between chunks
