"""Substitutions: a claim that is a context sentence with one name, place or date swapped for another.

"The Eiffel Tower is in Berlin." against "The Eiffel Tower is in Paris." shares most of its content with the
sentence, and in Chinese and Korean (whose units are characters, pairs and stems) it shares enough to pass for
support. What gives it away is its shape: the two are the same token sequence but for one short span, and the
claim's span appears nowhere in the context. That shape, not a list of entities, is what is looked for, in
every script:

- tokens are Latin words, single Han characters (Chinese has no spaces: a name is a run of them) and Hangul
  words without their trailing particle (베를린에 and 베를린은 are one name; a Korean word without a particle is
  mostly a predicate, whose ending and verb a paraphrase changes, and is never taken for a name);
- the claim and the sentence align as ``prefix + X + suffix`` and ``prefix + Y + suffix``, with X and Y short
  (at most 3 words or 4 Han characters), X ≠ Y, and the aligned part at least half of the claim;
- X is absent from the whole context, holds no digit, negation or hedge (numbers and negations have rules of
  their own), and in Latin script is a name (capitalised inside the sentence); CJK spans have no such mark, so
  the absence from the context and the alignment carry the decision there.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from functools import lru_cache
from typing import Final, NamedTuple

from faithfulness_pipeline.judging.offline.text.cues import KO_NEGATION_RE, ZH_HEDGE_RE, ZH_NEGATION_RE
from faithfulness_pipeline.judging.offline.text.scripts import HANGUL, fold_chinese, prepare
from faithfulness_pipeline.judging.offline.text.words import word_set

_HAN_CLASS: Final = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
#: Latin words (with inner apostrophes, hyphens and decimal points), single Han characters, Hangul words.
_LATIN: Final = "A-Za-z0-9\u00c0-\u024f"
_TOKEN_RE: Final = re.compile(rf"[{_LATIN}]+(?:[.'’-][{_LATIN}]+)*|[{_HAN_CLASS}]|[{HANGUL}]+")
#: A Hangul word's trailing particle (the longest first): 베를린에서 -> 베를린.
_KO_PARTICLE_RE: Final = re.compile(
    "(?:에서는|에서도|으로는|에게서|까지는|부터는|에서|에게|한테|으로|까지|부터|처럼|보다|이나|이며|라고|"
    "은|는|이|가|을|를|에|의|로|와|과|도|만|나)$"
)
_HAN_ONLY_RE: Final = re.compile(f"[{_HAN_CLASS}]")
#: Words that change a verdict by rules of their own (negation, hedging) or carry no fact of their own.
_NOT_A_NAME: Final = word_set(
    "not no never none may might could would should will can perhaps probably possibly only always also "
    "the a an this that these those it its he she they we i you"
)
_CJK_FUNCTION: Final = frozenset("是的了在和与與也都很就还還又会會要")
_MAX_LATIN: Final = 3
_MAX_HAN: Final = 4
_MAX_HANGUL: Final = 2


class Substitution(NamedTuple):
    claimed: str  # the claim's span, as the claim writes it
    stated: str  # the sentence's span in its place


class _Token(NamedTuple):
    key: str  # what is compared: lowercased, folded, without a Korean particle
    text: str  # as written


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    for match in _TOKEN_RE.finditer(text):
        word = match.group()
        if _HAN_ONLY_RE.fullmatch(word):
            key = fold_chinese(word)
        elif "\uac00" <= word[0] <= "\ud7a3":
            key = _KO_PARTICLE_RE.sub("", word) if len(word) > 1 else word
            key = key or word
        else:
            key = word.lower()
        out.append(_Token(key, word))
    return out


#: The most content weight (``units.Features``) a claim may lack in its best passage and still be that passage's
#: sentence but for one span: three words; four Han characters with the pairs they make, or two Hangul words
#: with their syllable pairs.
_MAX_ABSENT_LATIN: Final = 3.0
_MAX_ABSENT_CJK: Final = 7.0
_INNER_CAPITAL_RE: Final = re.compile(r"\s[A-ZÀ-Þ]")


def may_substitute(claim: str, absent_weight: float, cjk: bool) -> bool:
    """A cheap first look (no alignment, no token of the context): whether :func:`substitution` could find a
    swap in a claim that lacks ``absent_weight`` of its content in its best passage. Every token outside the
    swapped span is the sentence's, so little can be lacking; and a Latin span is a capitalised name."""
    if cjk:
        return absent_weight <= _MAX_ABSENT_CJK
    return absent_weight <= _MAX_ABSENT_LATIN and _INNER_CAPITAL_RE.search(claim) is not None


def substitution(claim: str, sentence: str, context: str) -> Substitution | None:
    """The span the claim swapped for the sentence's, when the claim is that sentence but for it (see the
    module docstring); ``context`` is every passage's text, where the claimed span must be absent."""
    said, stated = _tokens(prepare(claim)), _tokens(prepare(sentence))
    if len(said) < 3:
        return None
    matcher = SequenceMatcher(None, [t.key for t in said], [t.key for t in stated], autojunk=False)
    changed = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    if len(changed) != 1 or changed[0][0] != "replace":
        return None
    _, i1, i2, j1, j2 = changed[0]
    if 2 * (len(said) - (i2 - i1)) < len(said) or len(said) - (i2 - i1) < 2:
        return None  # too little of the claim is the sentence's for one span to be all that differs
    span, theirs = said[i1:i2], stated[j1:j2]
    if not (_short(span) and _short(theirs)) or not _factual(span, first=i1 == 0) or not _factual(theirs, first=False):
        return None
    if _named_in(span, context):
        return None  # named elsewhere in the context: another sentence may say it
    joiner = "" if all(_HAN_ONLY_RE.fullmatch(t.text) for t in span) else " "
    other = "" if all(_HAN_ONLY_RE.fullmatch(t.text) for t in theirs) else " "
    return Substitution(joiner.join(t.text for t in span), other.join(t.text for t in theirs))


def _short(span: list[_Token]) -> bool:
    if all(_HAN_ONLY_RE.fullmatch(t.text) for t in span):
        return len(span) <= _MAX_HAN
    if all("\uac00" <= t.text[0] <= "\ud7a3" for t in span):
        return len(span) <= _MAX_HANGUL
    return len(span) <= _MAX_LATIN


def _factual(span: list[_Token], *, first: bool) -> bool:
    """Whether the span may be a name, place or date rather than what rules of their own judge (numbers,
    negation, hedges) or a paraphrase's choice of words."""
    text = " ".join(t.text for t in span)
    # "May" the month is a name; "may" the hedge is not
    if any(c.isdigit() for c in text) or any(
            (t.key in _NOT_A_NAME and not t.text[0].isupper()) or t.text in _CJK_FUNCTION for t in span):
        return False
    if ZH_NEGATION_RE.search(text) or KO_NEGATION_RE.search(f" {text} ") or ZH_HEDGE_RE.search(text):
        return False
    if any("\uac00" <= t.text[0] <= "\ud7a3" and t.key == t.text for t in span):
        # A Korean name is a noun, which a particle follows (베를린에, 김영하가); a word without one is mostly a
        # predicate, where a paraphrase changes register or verb (수도입니다 for 수도이다, 걸립니다 for 소요된다).
        return False
    latin = [t.text for t in span if t.text[0].isascii() or "\u00c0" <= t.text[0] <= "\u024f"]
    if not latin:
        return True  # Han or Hangul: no capital letters to tell a name by
    # A name is capitalised where it is not the sentence's first word.
    return all(w[0].isupper() for w in latin) and not (first and len(latin) == 1)


def _named_in(span: list[_Token], context: str) -> bool:
    """Whether the context names the span anywhere: Latin words as a run of its words, a Han name as a run of
    its characters, a Hangul word by its stem inside any word (베를린 in 베를린에도)."""
    folded = _folded(context)
    if all(_HAN_ONLY_RE.fullmatch(t.text) or "\uac00" <= t.text[0] <= "\ud7a3" for t in span):
        return all(t.key in folded for t in span if not _HAN_ONLY_RE.fullmatch(t.key)) and (
            "".join(t.key for t in span if _HAN_ONLY_RE.fullmatch(t.key)) in folded)
    words = r"\W+".join(re.escape(t.key) for t in span)
    return re.search(rf"(?<!\w){words}(?!\w)", folded) is not None


@lru_cache(maxsize=64)
def _folded(context: str) -> str:
    # Every claim of an item is checked against the same context: it is folded once.
    return fold_chinese(prepare(context).lower())
