"""What a claim is matched against: a passage's :class:`Haystack` (its English units and folded text),
its :class:`Sentences` index for the sentence-level checks, and ``missing_terms``, the claim's words a
haystack lacks (the reason an unsupported verdict gives).

The context side of matching, built once per passage and shared by all of an item's claims, while
``units`` builds the claim side once per claim.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate

from faithfulness_pipeline.judging.offline.text.cues import EN_NEGATION_WORDS, cjk_may_negate
from faithfulness_pipeline.judging.offline.text.numbers import (
    DIGIT_RE,
    WORD_NUMBERS,
    digit_numbers,
    digit_values,
    has_multiplier,
    numbers_of,
    zh_numbers,
)
from faithfulness_pipeline.judging.offline.text.scripts import (
    HAN_RE,
    HAN_RUN_RE,
    HANGUL_FIRST,
    HANGUL_LAST,
    HANGUL_WORD_RE,
    fold_chinese,
    prepare,
)
from faithfulness_pipeline.judging.offline.text.sentences import passage_sentences
from faithfulness_pipeline.judging.offline.text.units import Features, latin_part
from faithfulness_pipeline.judging.offline.text.words import (
    ASCII_WORDS,
    LATIN_OR_BREAK_RE,
    LATIN_SURFACE_RE,
    ZH_STOP,
    ZH_STOP_CHARS,
    latin_words,
    word_units,
)


@dataclass(slots=True)
class Haystack:
    """Where a claim's units are looked for: a context text's English units, and the text itself
    (prepared and folded; empty when ASCII) for the Han and Hangul units.

    Matching CJK units as substrings gives exactly what the unit sets of ``units.passage_units`` give
    (a character or pair is in the set exactly when it is in the text; a stem exactly when it
    starts a Hangul word), without building a number for every character pair of every context.
    """

    latin: set[str]
    folded: str

    def weight(self, feats: Features) -> float:
        """The total weight of the claim's units found here (an exact sum of ones and halves)."""
        found = len(self.latin.intersection(feats.latin))
        needles = feats.needles
        text = self.folded
        if needles is None or not text:
            return float(found)
        contains = text.__contains__  # mapped over the needles: the loops run in C
        found += sum(map(contains, needles.han_pairs))
        halves = sum(map(contains, needles.han_chars)) + sum(map(contains, needles.hangul_pairs))
        for stem in filter(contains, needles.stems):
            found += _starts_word(text, stem)
        for word in filter(contains, needles.words):
            found += _is_word(text, word)
        return found + 0.5 * halves


def _starts_word(text: str, stem: str) -> bool:
    """Whether the two Hangul syllables ``stem`` start a Hangul word of ``text``."""
    i = text.find(stem)
    while i >= 0:
        if i == 0 or not HANGUL_FIRST <= text[i - 1] <= HANGUL_LAST:
            return True
        i = text.find(stem, i + 1)
    return False


def _is_word(text: str, syllable: str) -> bool:
    """Whether the Hangul ``syllable`` stands alone, a one-syllable Hangul word of ``text``."""
    i = text.find(syllable)
    while i >= 0:
        before_ok = i == 0 or not HANGUL_FIRST <= text[i - 1] <= HANGUL_LAST
        after_ok = i + 1 == len(text) or not HANGUL_FIRST <= text[i + 1] <= HANGUL_LAST
        if before_ok and after_ok:
            return True
        i = text.find(syllable, i + 1)
    return False


def passage_haystack(text: str) -> tuple[Haystack, tuple[float, ...], bool]:
    """What ``units.passage_units`` gives, with a :class:`Haystack` in place of the unit set."""
    haystack, found, latin_negation = passage_content(text)
    return haystack, found, latin_negation or cjk_may_negate(text)


def passage_content(text: str) -> tuple[Haystack, tuple[float, ...], bool]:
    """``passage_haystack`` with only the English part of the negation hint (free once the words
    are known); ``cjk_may_negate`` gives the rest, which only a passage that nearly supports a claim
    needs."""
    text = prepare(text)
    lower = text.lower()
    words = latin_words(lower)
    latin, found = latin_part(lower, words)
    latin_negation = "n't" in lower or not EN_NEGATION_WORDS.isdisjoint(words)
    if text.isascii():
        return Haystack(latin, ""), tuple(found), latin_negation
    if HAN_RE.search(text) is None:
        # Folding and Chinese numerals concern Han characters only: two scans saved on Korean text.
        return Haystack(latin, text), tuple(found), latin_negation
    found.extend(zh_numbers(text))
    return Haystack(latin, fold_chinese(text)), tuple(found), latin_negation


@dataclass(slots=True)
class Sentences:
    """A passage's sentences (see ``passage_sentences``), indexed so that a claim's weight in every
    sentence comes from one scan of the passage per claim unit, and numbers only when asked for.

    ``weights`` equals ``Haystack(units of the sentence, its folded text).weight`` sentence by
    sentence: the sentences are joined by line breaks, and a line break is no Hangul, so a stem or
    a one-syllable word found in the joined text is one in its own sentence.
    """

    parts: list[str]
    latin: list[set[str]]
    #: the sentences, lowercased (numbers are read from these) and folded (CJK units are found here)
    lower: list[str]
    folded: str
    starts: list[int]
    has_word_numbers: bool
    _numbers: list[tuple[float, ...]] | None = None
    _folded_parts: list[str] | None = None

    def weights(self, feats: Features) -> list[float]:
        """The claim's weight in each sentence (exact sums of ones and halves)."""
        found = [float(len(units.intersection(feats.latin))) for units in self.latin]
        needles = feats.needles
        if needles is None or not self.folded:
            return found
        if self._folded_parts is None:
            self._folded_parts = self.folded.split("\n")
        pairs, halves = needles.han_pairs, needles.han_chars + needles.hangul_pairs
        if pairs or halves:
            # Sentence by sentence, every needle looked for in C.
            for k, part in enumerate(self._folded_parts):
                contains = part.__contains__
                found[k] += sum(map(contains, pairs)) + 0.5 * sum(map(contains, halves))
        # A stem or word needs a look at its neighbours: each is found in the joined text, and each
        # occurrence is given to its sentence (a line break is no Hangul, so a word that starts or
        # ends a sentence starts or ends there in the joined text too).
        text = self.folded
        for group, check in ((needles.stems, _starts_word_at), (needles.words, _is_word_at)):
            for needle in group:
                last = -1
                i = text.find(needle)
                while i >= 0:
                    k = bisect_right(self.starts, i) - 1
                    if k != last and check(text, needle, i):
                        found[k] += 1.0
                        last = k
                    i = text.find(needle, i + 1)
        return found

    def numbers(self, i: int) -> tuple[float, ...]:
        """The numbers of sentence ``i``."""
        if self._numbers is not None:
            return self._numbers[i]
        part = self.lower[i]
        if self.has_word_numbers:
            found = numbers_of(part, latin_words(part))
        else:
            found = digit_values(part) if DIGIT_RE.search(part) else []
        if not part.isascii():
            found += zh_numbers(self.parts[i])
        return tuple(found)


def _starts_word_at(text: str, stem: str, i: int) -> bool:
    return i == 0 or not HANGUL_FIRST <= text[i - 1] <= HANGUL_LAST


def _is_word_at(text: str, syllable: str, i: int) -> bool:
    return _starts_word_at(text, syllable, i) and (
        i + 1 == len(text) or not HANGUL_FIRST <= text[i + 1] <= HANGUL_LAST
    )


def sentence_index(text: str) -> Sentences:
    """The passage's sentences with what a claim is matched against (see :class:`Sentences`)."""
    text = prepare(text)
    parts = passage_sentences(text)
    joined = "\n".join(parts)
    lower = joined.lower()
    if lower.isascii():
        chunks = lower.encode("ascii").translate(ASCII_WORDS).decode("ascii").split("\n")
    else:
        chunks = " ".join(LATIN_OR_BREAK_RE.findall(lower)).split("\n")
    distinct = set(" ".join(chunks).split())
    get = word_units(distinct).__getitem__
    # One word list per sentence by C-level joins and splits: no per-word Python loop.
    latin: list[set[str]] = [set(map(get, chunk.split())) for chunk in chunks] if parts else []
    for units in latin:
        units.discard("")
    has_word_numbers = not WORD_NUMBERS.keys().isdisjoint(distinct)
    folded = "" if lower.isascii() else fold_chinese(joined)
    starts = list(accumulate((len(x) + 1 for x in parts[:-1]), initial=0))
    index = Sentences(parts, latin, lower.split("\n"), folded, starts, has_word_numbers)
    if not has_word_numbers and has_multiplier(lower) and DIGIT_RE.search(lower):
        # A multiplier may follow its number across a sentence break ("3\nmillion"): the whole
        # passage is scanned at once, from the lowercased parts (lowercasing may change a text's
        # length: "İ"), and every sentence's numbers are kept.
        nums: list[list[float]] = [[] for _ in parts]
        lower_starts = list(accumulate((len(x) + 1 for x in index.lower[:-1]), initial=0))
        for value, pos in digit_numbers(lower):
            nums[bisect_right(lower_starts, pos) - 1].append(value)
        for i, part in enumerate(parts):
            if not part.isascii():
                nums[i] += zh_numbers(part)
        index._numbers = [tuple(n) for n in nums]
    return index


def missing_terms(text: str, against: Haystack) -> list[str]:
    """The text's content words (as written) whose units ``against`` lacks, in order, once each."""
    out: list[str] = []
    text = prepare(text)
    surface = LATIN_SURFACE_RE.findall(text)
    unit_of = word_units({w.lower() for w in surface})
    for word in surface:
        unit = unit_of[word.lower()]
        if unit and unit not in against.latin:
            out.append(word)
    if not text.isascii():
        context = against.folded
        folded = fold_chinese(text)
        for m in HAN_RUN_RE.finditer(folded):
            run, shown = m.group(0), text[m.start() : m.end()]
            # A character is covered if it, or a pair it belongs to, is in the context.
            known = [c not in ZH_STOP and c in context for c in run]
            paired = [run[i : i + 2] in context for i in range(len(run) - 1)]
            covered = [
                k or (i > 0 and paired[i - 1]) or (i < len(paired) and paired[i]) for i, k in enumerate(known)
            ]
            piece = ""
            for ch, ok in zip([*shown, ""], [*covered, True], strict=True):
                if not ok:
                    piece += ch
                    continue
                piece = piece.strip(ZH_STOP_CHARS)
                if piece:
                    out.append(piece)
                piece = ""
        for word in HANGUL_WORD_RE.findall(text):
            if not (_starts_word(context, word[:2]) if len(word) > 1 else _is_word(context, word)):
                out.append(word)
    return list(dict.fromkeys(out))
