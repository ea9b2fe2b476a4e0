"""The offline judge's rules: which sentences of an answer are claims, and each claim's verdict.

Claims are the sentences of the answer, minus questions, pleasantries, lead-ins ("Here is a
summary:") and sentences without any content word. Each claim is judged by the share of its
content (English word stems, Han characters and bigrams, Hangul word stems and bigrams; see
``text.units``) that the best-matching passage contains, by whether its numbers appear in the
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

Each verdict depends on its item alone (an answer, or claims and their context): that is what lets
:class:`~faithfulness_pipeline.judging.offline.judge.OfflineJudge` store results per item and share a
batch between processes without changing any result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from faithfulness_pipeline.core.port import ClaimVerdict
from faithfulness_pipeline.judging.offline.text.cues import (
    absolutes,
    approximates,
    cjk_may_negate,
    negated,
    negated_sentences,
)
from faithfulness_pipeline.judging.offline.text.haystack import (
    Haystack,
    Sentences,
    missing_terms,
    passage_content,
    sentence_index,
)
from faithfulness_pipeline.judging.offline.text.numbers import may_approximate, number_matches
from faithfulness_pipeline.judging.offline.text.sentences import is_lead_in, is_pleasantry, is_question, split_sentences
from faithfulness_pipeline.judging.offline.text.substitution import may_substitute, substitution
from faithfulness_pipeline.judging.offline.text.units import Features, features, has_content

#: Share of a claim's weighted content units the best passage must contain to support it (words).
SUPPORT_COVERAGE = 0.7
#: The same for Han and Hangul units: character bigrams miss more of a faithful paraphrase than
#: words do. All three bars were chosen on datasets/dev (see bench/results/offline_agreement.md).
HAN_SUPPORT_COVERAGE = 0.4
HANGUL_SUPPORT_COVERAGE = 0.6
#: Share of a claim one context sentence must hold before a different number there is a conflict
#: rather than a different topic.
CONFLICT_COVERAGE = 0.5


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
    text: str  # every passage, for what a claim must not find anywhere in the context

    @classmethod
    def of(cls, context: Sequence[str]) -> _Context:
        passages = [_Passage.of(i, text) for i, text in enumerate(context) if text and not text.isspace()]
        numbers = tuple(x for p in passages for x in p.numbers)
        return cls(passages, numbers, frozenset(numbers), "\n".join(p.text for p in passages))

    def missing(self, claimed: Sequence[float], approximate: bool) -> tuple[list[float], list[tuple[float, float]]]:
        """The claimed numbers the context does not state, and (claimed, stated) for those it states only
        approximately: a number the claim gives as approximate ("about 300") may stand for a stated one within
        10 % (``number_matches``); any other must be stated as it is."""
        missing: list[float] = []
        near: list[tuple[float, float]] = []
        for x in claimed:
            if x in self.number_set:
                continue
            close = next((y for y in self.numbers if number_matches(x, y)), None) if (
                approximate and may_approximate(x)) else None
            if close is None:
                missing.append(x)
            else:
                near.append((x, close))
        return missing, near


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
    missing, near = ctx.missing(claimed_numbers, bool(claimed_numbers) and approximates(claim))
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
    if look_closer and best_cov < 1.0 and may_substitute(
            claim, (1.0 - best_cov) * total, bool(feats.han_weight or feats.hangul_weight)):
        swapped = _swapped(claim, feats, total, best, ctx)
        if swapped is not None:
            return ClaimVerdict("contradicted", hedged, swapped, best_i)

    added = feats.absolutes - best.absolutes() if feats.absolutes else frozenset()
    if best_cov >= bar and not missing and not added:
        # An approximate number that stood for a stated one is named: the verdict rests on it.
        approximated = " ".join(f"The claim's {_fmt(x)} approximates {_fmt(y)} (within 10 %)." for x, y in near)
        return ClaimVerdict("supported", hedged, approximated or None, best_i)

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


def _swapped(claim: str, feats: Features, total: float, passage: _Passage, ctx: _Context) -> str | None:
    """The reason of a contradiction when the claim is the passage's closest sentence with one name, place or
    date swapped for one the context never names (``text.substitution``), else None."""
    si, sentence_cov = _closest_sentence(feats, total, passage)
    if si is None or sentence_cov < CONFLICT_COVERAGE:
        return None
    found = substitution(claim, passage.sentences.parts[si], ctx.text)
    if found is None:
        return None
    return f"The claim says '{found.claimed}' where passage {passage.index} says '{found.stated}'."


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
