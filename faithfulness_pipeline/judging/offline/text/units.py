"""Content units of a claim (``features``) and of a passage (``passage_units``).

English stems, Han characters and pairs, Hangul word stems and inner pairs, each with its weight; a
claim's numbers and cues are gathered in the same scan. CJK units are ints made from UTF-16 code units,
which memoryview casts build in C. The claim side of matching: what a claim is matched against is in
``haystack``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from faithfulness_pipeline.judging.offline.text.cues import (
    CJK_ABSOLUTE_RE,
    EN_ABSOLUTES,
    EN_NEGATION_WORDS,
    KO_NEGATION_RE,
    ZH_HEDGE_RE,
    ZH_NEGATION_RE,
    ZH_NOT_NEGATION_RE,
    en_hedged,
    en_negations,
    has_ko_negation,
    ko_hedged,
)
from faithfulness_pipeline.judging.offline.text.numbers import DIGIT_RE, numbers_of, zh_numbers
from faithfulness_pipeline.judging.offline.text.scripts import (
    CJK_RE,
    HAN_RE,
    HAN_RUN_RE,
    HANGUL,
    HANGUL_RE,
    HANGUL_WORD_RE,
    fold_chinese,
    prepare,
)
from faithfulness_pipeline.judging.offline.text.words import ZH_STOP, latin_words, word_units

#: A content unit: an English stem (str), or a CJK character or pair as an int (see ``_cjk_key``).
Unit = str | int

_HANGUL_STEM_RE = re.compile(f"(?<![{HANGUL}])[{HANGUL}]{{2}}")
_HANGUL_SYLLABLE_WORD_RE = re.compile(f"(?<![{HANGUL}])[{HANGUL}](?![{HANGUL}])")


def latin_part(lower: str, words: list[str]) -> tuple[set[str], list[float]]:
    """Units of the Latin words and the (digit or English word) numbers of lowercased text."""
    distinct = set(words)
    unit_of = word_units(distinct)
    units = set(map(unit_of.__getitem__, distinct))
    units.discard("")
    return units, numbers_of(lower, words, distinct)


# CJK units are ints: a character is its code, a pair of characters the 32-bit number their
# UTF-16 code units make. Contexts then yield every character and pair of a text through two
# memoryview casts, several times faster than building one string per pair. Characters outside
# the Basic Multilingual Plane (rare Han extensions) match only as parts of pairs.
_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"
#: Set on the pair that starts a Hangul word: the stem, which must match a stem.
_STEM = 1 << 32


def _cjk_key(chars: str) -> int:
    """The unit of one or two BMP characters."""
    return int.from_bytes(chars.encode(_UTF16), sys.byteorder)


def _cjk_part(text: str, found: list[float], has_han: bool, has_hangul: bool) -> CjkNeedles:
    """A claim's Han and Hangul units (as text, see ``Features.units``); adds its Chinese numerals
    to ``found``."""
    chars: list[str] = []
    pairs: list[str] = []
    han_runs = HAN_RUN_RE.findall(fold_chinese(text)) if has_han else []
    if han_runs:
        chars = list(set("".join(han_runs)).difference(ZH_STOP))
        pairs = list({run[i : i + 2] for run in han_runs for i in range(len(run) - 1)})
        found.extend(zh_numbers(text))
    words = HANGUL_WORD_RE.findall(text) if has_hangul else []
    stems: list[str] = []
    singles: list[str] = []
    inner: list[str] = []
    if words:
        stems = list({word[:2] for word in words if len(word) > 1})
        singles = list({word for word in words if len(word) == 1})
        inner = list({word[i : i + 2] for word in words if len(word) > 2 for i in range(1, len(word) - 1)})
    return CjkNeedles(tuple(pairs), tuple(chars), tuple(inner), tuple(stems), tuple(singles))


def _pair_units(pairs: Sequence[str]) -> Iterable[int]:
    return memoryview("".join(pairs).encode(_UTF16)).cast("I") if pairs else ()


# ``_STEM | key`` of a two-character stem "ab" is the 64-bit number whose UTF-16 code units are
# a, b, 1, 0 (little-endian): appending "\x01\x00" to every stem and casting the encoded string
# builds all stem units in C. A one-syllable word "a" is a, 0, 1, 0.
_FAST_STEMS = sys.byteorder == "little"
_PAIR_STEM_TAIL = "\x01\x00"
_SYLLABLE_STEM_TAIL = "\x00\x01\x00"


def _stem_units(stems: Sequence[str]) -> Iterable[int]:
    """The stem units of Hangul stems, all of two characters or all of one."""
    if not stems:
        return ()
    if not _FAST_STEMS:
        return [_STEM | _cjk_key(stem) for stem in stems]
    tail = _PAIR_STEM_TAIL if len(stems[0]) == 2 else _SYLLABLE_STEM_TAIL
    return memoryview((tail.join(stems) + tail).encode(_UTF16)).cast("Q")


def _pairs(text: str) -> set[int]:
    """The units of all adjacent character pairs of a text."""
    raw = text.encode(_UTF16)
    pairs = set(memoryview(raw[: len(raw) // 4 * 4]).cast("I"))
    pairs.update(memoryview(raw[2 : 2 + (len(raw) - 2) // 4 * 4]).cast("I"))
    return pairs


def _cjk_context_units(text: str, found: list[float]) -> set[Unit]:
    """Every character and adjacent pair of a context text (a superset of what a claim can ask
    for) and the stems of its Hangul words; adds its Chinese numerals to ``found``."""
    folded = fold_chinese(text)
    units: set[Unit] = set(_pairs(folded))
    has_han = bool(HAN_RE.search(folded))
    if has_han:
        # single characters: only Han ones are ever asked for
        units.update(memoryview(folded.encode(_UTF16)).cast("H"))
    if HANGUL_RE.search(folded):
        # Each two-syllable stem is exactly two characters: joined, they cast like the pairs.
        units.update(_stem_units(_HANGUL_STEM_RE.findall(folded)))
        units.update(_stem_units(_HANGUL_SYLLABLE_WORD_RE.findall(folded)))
    if has_han:
        found.extend(zh_numbers(text))
    return units


@dataclass(frozen=True, slots=True)
class CjkNeedles:
    """A claim's Han and Hangul units as text, each once, grouped by weight and by where a context
    holds them."""

    #: Han character pairs (weight 1), found anywhere
    han_pairs: tuple[str, ...]
    #: Han characters other than function characters (weight 0.5), found anywhere
    han_chars: tuple[str, ...]
    #: Hangul syllable pairs inside a word, after its first syllable (weight 0.5), found anywhere
    hangul_pairs: tuple[str, ...]
    #: Hangul stems: a word's first two syllables (weight 1), found only where a Hangul word starts
    stems: tuple[str, ...]
    #: one-syllable Hangul words (weight 1), found only as a whole one-syllable word
    words: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Features:
    """What the judge needs to know about one claim.

    Its content units, with weights: English stems 1; Han characters 0.5 and pairs 1 (a pair is
    nearer to a word); Hangul word stems 1 and inner syllable pairs 0.5. The judge matches them
    as text (``latin`` and ``needles``); ``units`` gives them as the numbers ``passage_units`` uses.
    """

    #: the English units (stems)
    latin: frozenset[str]
    numbers: list[float]
    negations: int
    hedged: bool
    absolutes: frozenset[str]
    #: the Han and Hangul units, as the text a context must contain (see ``haystack.Haystack``)
    needles: CjkNeedles | None = None
    #: the part of the units' total weight that is Han, and Hangul (the rest is English)
    han_weight: float = 0.0
    hangul_weight: float = 0.0

    @property
    def total(self) -> float:
        """The units' total weight (units of different kinds never coincide, so it adds up)."""
        return len(self.latin) + self.han_weight + self.hangul_weight

    @property
    def units(self) -> dict[Unit, float]:
        """The units with their weights, keyed like ``passage_units`` (built on request)."""
        units: dict[Unit, float] = dict.fromkeys(self.latin, 1.0)
        n = self.needles
        if n is not None:
            # The unit of a (BMP) character is its code and that of a pair the code units of the
            # pair read as one number.
            units.update(dict.fromkeys(map(ord, n.han_chars), 0.5))
            units.update(dict.fromkeys(_pair_units(n.han_pairs), 1.0))
            units.update(dict.fromkeys(_pair_units(n.hangul_pairs), 0.5))
            units.update(dict.fromkeys(_stem_units(n.stems), 1.0))
            units.update(dict.fromkeys(_stem_units(n.words), 1.0))
        return units


def features(text: str) -> Features:
    """Units, numbers, negation, hedging and absolute quantifiers of a sentence, in one scan."""
    text = prepare(text)
    lower = text.lower()
    words = latin_words(lower)
    latin, found = latin_part(lower, words)
    negations = en_negations(words, lower)
    hedged = en_hedged(words, text)
    absolute = EN_ABSOLUTES.intersection(words)
    if text.isascii():
        return Features(frozenset(latin), found, negations, hedged, absolute)
    # Every Chinese cue is written in Han and every Korean one in Hangul: a script the claim lacks
    # needs no scan.
    has_han = HAN_RE.search(text) is not None
    has_hangul = HANGUL_RE.search(text) is not None
    n = _cjk_part(text, found, has_han, has_hangul)
    if has_han:
        negations += len(ZH_NEGATION_RE.findall(ZH_NOT_NEGATION_RE.sub("", text)))
        hedged = hedged or bool(ZH_HEDGE_RE.search(text))
    if has_hangul:
        negations += len(KO_NEGATION_RE.findall(text))
        hedged = hedged or ko_hedged(text)
    if has_han or has_hangul:
        absolute = absolute.union(CJK_ABSOLUTE_RE.findall(text))
    han = len(n.han_pairs) + 0.5 * len(n.han_chars)
    hangul = len(n.stems) + len(n.words) + 0.5 * len(n.hangul_pairs)
    return Features(frozenset(latin), found, negations, hedged, absolute, n, han, hangul)


def has_content(text: str) -> bool:
    """Whether a sentence holds any content unit or number (cheaper than ``features``)."""
    if DIGIT_RE.search(text) or (not text.isascii() and CJK_RE.search(text)):
        return True
    distinct = set(latin_words(prepare(text).lower()))
    return any(map(word_units(distinct).__getitem__, distinct))


def numbers(text: str) -> list[float]:
    """Numeric values in the text: digits (with thousands separators and multipliers such as
    'million', 万, 억), English number words from two upward, Chinese numerals before a measure word.
    """
    return features(text).numbers


def passage_units(text: str) -> tuple[set[Unit], tuple[float, ...], bool]:
    """A whole passage's content units and numbers, and whether it may contain a negation (a
    cheap over-approximation that tells when its sentences need a closer look).

    The plain form of what the judge matches against: it uses ``haystack.passage_content``, which
    finds the same units in the text without building them."""
    text = prepare(text)
    lower = text.lower()
    words = latin_words(lower)
    latin, found = latin_part(lower, words)
    may_negate = "n't" in lower or not EN_NEGATION_WORDS.isdisjoint(words)
    units: set[Unit] = set(latin)
    if text.isascii():
        return units, tuple(found), may_negate
    units.update(_cjk_context_units(text, found))
    may_negate = may_negate or bool(ZH_NEGATION_RE.search(text)) or has_ko_negation(text)
    return units, tuple(found), may_negate
