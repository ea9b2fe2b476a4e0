"""Cues: negation, hedges and absolute quantifiers, in English, Chinese and Korean.

They change a verdict without being content: a negation on one side only contradicts, a hedge marks
the claim speculative, an absolute ("only", 只有, 모든) the context lacks leaves it unsupported. Apart
from ``units`` because the judge asks for a passage's cues only when a claim nearly matches it, sentence
by sentence; ``units.features`` reuses these patterns on the claim side.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from itertools import accumulate

from faithfulness_pipeline.judging.offline.text.scripts import prepare
from faithfulness_pipeline.judging.offline.text.sentences import passage_sentences
from faithfulness_pipeline.judging.offline.text.words import latin_words, word_set

EN_NEGATION_WORDS = word_set("not no never none nobody nothing neither nor cannot without")
_EN_NOT_NEGATION_RE = re.compile(r"\b(?:not only|not just|no doubt|no longer than|nothing but)\b")
# Chinese words that contain a negation character but do not negate.
ZH_NOT_NEGATION_RE = re.compile(
    "非常|未来|未來|无论|無論|不过|不過|不断|不斷|不仅|不僅|不但|不少|不久|不管|非洲|除非|莫非|毫无疑问|"
    "无数|無數|不得不|没错|沒錯|不错|不錯|是否|否则|否則"
)
# 别/別 is left out: it negates only in commands (别去) and far more often means "other" (别人).
ZH_NEGATION_RE = re.compile("[不没沒未非无無勿否]")
KO_NEGATION_RE = re.compile(r"(?:^|\s)(?:안|못|아니)(?=\s)|않|없|못하|못했|못한|못할|아니[다라고며었야에요]|아닌|아닙")
# The same matches, split so that each pattern starts with a character class the regex engine can
# skip ahead by: about twice as fast when only the presence of a negation matters.
_KO_NEGATION_INNER_RE = re.compile("않|없|못[하했한할]|아니[다라고며었야에요]|아닌|아닙")
_KO_NEGATION_WORD_RE = re.compile(r"\s(?:안|못|아니)(?=\s)")
_KO_NEGATION_FIRST_WORD_RE = re.compile(r"(?:안|못|아니)(?=\s)")

_EN_HEDGES = word_set(
    "might could possibly perhaps probably likely unlikely maybe presumably apparently seemingly seem seems"
)
ZH_HEDGE_RE = re.compile("可能|也许|也許|或许|或許|大概|恐怕|似乎|好像|估计|估計|说不定|說不定|大约|大約")
_KO_HEDGE_RE = re.compile(r"아마|것 ?같|듯|지도 모르|가능성|수도 있|[\uac00-\ud7a3]\s*수\s*(?:도\s*)?있")
_MAY_RE = re.compile(r"\bmay\b", re.IGNORECASE)

EN_ABSOLUTES = word_set("only always every everyone everything entirely solely exclusively")
CJK_ABSOLUTE_RE = re.compile(
    "只有|所有|一直|每个|每個|从来|從來|永远|永遠|全部|总是|總是|唯一|" "모든|항상|오직|전부|언제나|반드시"
)


def en_negations(words: list[str], lower: str) -> int:
    hits = EN_NEGATION_WORDS.intersection(words)
    n = sum(map(words.count, hits)) if hits else 0
    if "n't" in lower:
        n += sum(1 for w in words if w.endswith("n't"))
    if n and hits:
        n -= len(_EN_NOT_NEGATION_RE.findall(lower))  # "not only", "no doubt"
    return n


def en_hedged(words: list[str], text: str) -> bool:
    if not _EN_HEDGES.isdisjoint(words):
        return True
    if "appear to" in text or "appears to" in text or "Appears to" in text:
        return True
    if "may" in words:
        # "may" hedges; capitalised "May" after the first word is the month.
        return any(m.group(0) == "may" or m.start() == 0 for m in _MAY_RE.finditer(text))
    return False


def has_ko_negation(text: str) -> bool:
    """``bool(KO_NEGATION_RE.search(text))``, faster."""
    return bool(
        _KO_NEGATION_INNER_RE.search(text)
        or _KO_NEGATION_WORD_RE.search(text)
        or _KO_NEGATION_FIRST_WORD_RE.match(text)
    )


def _cjk_negations(text: str) -> int:
    n = len(ZH_NEGATION_RE.findall(ZH_NOT_NEGATION_RE.sub("", text)))
    return n + len(KO_NEGATION_RE.findall(text))


def ko_hedged(text: str) -> bool:
    for m in _KO_HEDGE_RE.finditer(text):
        token = m.group(0)
        if not token.endswith("있"):
            return True
        # "~ㄹ 수 있": the syllable before 수 must end in ㄹ (할, 될, 갈 ...); "~는 수" is not a hedge.
        syllable = token[0]
        if syllable == "도" or (ord(syllable) - 0xAC00) % 28 == 8:
            return True
    return False


def negated(text: str) -> bool:
    """Whether a sentence contains a negation (English, Chinese or Korean)."""
    text = prepare(text)
    lower = text.lower()
    n = en_negations(latin_words(lower), lower)
    if not text.isascii():
        n += _cjk_negations(text)
    return n > 0


# Where a negation may be, in lowercased text: starting with a literal keeps the scan fast; every
# hit is confirmed by ``negated`` on its sentence ("piano" ends in "no").
_NEGATION_HINT_RE = re.compile(r"n(?:ot|o|ever|one|obody|othing|either|or)\b|cannot|without|n't")


def negated_sentences(text: str) -> list[str]:
    """The sentences of a passage (as ``passage_sentences`` splits it) that contain a negation."""
    text = prepare(text)
    parts = passage_sentences(text)
    lower = "\n".join(parts).lower()
    positions = [m.start() for m in _NEGATION_HINT_RE.finditer(lower)]
    if not text.isascii():
        positions += [m.start() for m in ZH_NEGATION_RE.finditer(lower)]
        positions += [m.start() for m in KO_NEGATION_RE.finditer(lower)]
    if not positions:
        return []
    starts = list(accumulate((len(x) + 1 for x in parts[:-1]), initial=0))
    hit = sorted({bisect_right(starts, pos) - 1 for pos in positions})
    return [parts[i] for i in hit if negated(parts[i])]


def cjk_may_negate(text: str) -> bool:
    """Whether a passage may contain a Chinese or Korean negation (an over-approximation)."""
    text = prepare(text)
    return not text.isascii() and (bool(ZH_NEGATION_RE.search(text)) or has_ko_negation(text))


def absolutes(text: str) -> frozenset[str]:
    """Absolute quantifiers ("only", "always", 只有, 모든 ...): a claim adding one overgeneralises."""
    text = prepare(text)
    found = EN_ABSOLUTES.intersection(latin_words(text.lower()))
    if not text.isascii():
        found = found.union(CJK_ABSOLUTE_RE.findall(text))
    return found


# A number the claim gives as approximate ("about 300", "300여 명", "300多米", "约300"): only such a number may
# stand for a nearby stated one. A flat "300 metres" against "330 metres" is a different number.
_APPROXIMATE_RE = re.compile(
    r"\b(?:about|around|approximately|approx|roughly|nearly|almost|some|over|under|more than|less than|fewer than|"
    r"close to|up to|circa|ca)\.?\s+[$€£¥]?\d"
    r"|~\s*\d|\d[\d,.]*\s*\+"
    r"|(?:约|約|大约|大約|将近|將近|近|超过|超過|逾|不到|上下)\s*\d|\d[\d,.]*\s*(?:多|余|餘)"
    r"|\d[\d,.]*\s*[^\s\d]{0,3}(?:左右|上下)"
    r"|(?:약|대략|거의)\s*\d|\d[\d,.]*\s*[^\s\d]{0,3}\s*(?:여|가량|남짓|쯤|정도|이상|미만|넘)",
    re.IGNORECASE,
)


def approximates(text: str) -> bool:
    """Whether the text gives a number as approximate (see ``_APPROXIMATE_RE``)."""
    return _APPROXIMATE_RE.search(text) is not None
