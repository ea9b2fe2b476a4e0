"""Sentences: splitting answers and passages, and telling the sentences that are no claim.

Sentences end at ``.!?`` followed by a space (not after abbreviations, initials or inside decimals), at
``。！？`` and the full-width ``；`` (in CJK text it separates independent clauses), and at line breaks;
list bullets are dropped; closing quotes stay with their sentence; an ellipsis ends a sentence only
before a capital letter. ``passage_sentences`` is the cheaper split of context passages. Questions,
pleasantries and lead-ins ("Here is a summary:") are recognised here too. Punctuation and a few fixed
phrases only, no content units: nothing here depends on how content is matched.
"""

from __future__ import annotations

import re

from faithfulness_pipeline.judging.offline.text.scripts import CJK_RE
from faithfulness_pipeline.judging.offline.text.words import word_set

# Never end a sentence: titles and Latin abbreviations that are always followed by more text.
_ABBREV_INNER = word_set(
    "mr mrs ms dr prof st vs e.g i.e cf approx dept univ gen col capt lt sgt rev hon gov sen rep mt ft al"
)
# Abbreviations that end a sentence only when no number follows ("No. 5", "Fig. 2", "Sept. 2017").
_ABBREV_BEFORE_NUMBER = word_set(
    "no nos vol vols fig figs op p pp jan feb mar apr jun jul aug sep sept oct nov dec"
)
# Abbreviations that end a sentence only when a capital letter (or CJK text) follows.
_ABBREV_FINAL = word_set("etc inc ltd co corp jr sr a.m p.m bros esp")

_TERMINATOR_RE = re.compile(r"[.!?…。！？；]+[\"'”’»)\]」』）》]*")
_CLOSERS = "\"'”’»)]」』）》"
_OPEN_QUOTES = "\"“‘«「『（(["
_BULLET_RE = re.compile(r"\s*(?:[-*•·‣▪●◦–—>]+|\d{1,3}[.)、]|[(（]\d{1,3}[)）]|#{1,6})\s+")
_NEXT_CHAR_RE = re.compile(r"\s*(\S?)")
_INITIALS_RE = re.compile(r"(?:[A-Za-z]\.)*[A-Za-z]")


def _is_boundary(line: str, start: int, end: int) -> bool:
    """Whether the terminator at line[start:end] (closing quotes included) ends a sentence."""
    punct = line[start:end].rstrip(_CLOSERS)
    if punct[-1] in "。！？；":
        return True
    after = line[end : end + 1]
    glued = bool(after) and not after.isspace()
    nxt = m.group(1) if (m := _NEXT_CHAR_RE.match(line, end)) else ""
    if "…" in punct or punct.startswith(".."):
        return not glued and (not nxt or nxt.isupper() or nxt in _OPEN_QUOTES)
    if glued:
        # "3.5", "U.S.A", "Yahoo!Inc" continue; CJK text written without a space after "!?" or
        # after "다." does not.
        prev = line[start - 1 : start]
        return bool(CJK_RE.match(after)) and (punct[0] != "." or bool(CJK_RE.match(prev)))
    if not nxt or punct != ".":
        return True
    j = start
    while j > 0 and ((line[j - 1].isascii() and line[j - 1].isalpha()) or line[j - 1] == "."):
        j -= 1
    raw = line[j:start].lstrip(".")
    if not raw:
        return True
    word = raw.lower()
    if word in _ABBREV_INNER or raw == "v":  # "Brown v. Board": lowercase v is "versus"
        return False
    if word in _ABBREV_BEFORE_NUMBER:
        return not nxt.isdigit()
    if word in _ABBREV_FINAL:
        return nxt.isupper() or bool(CJK_RE.match(nxt))
    # "U.S. Army", "J. K. Rowling": initials continue; "Francis I. The" and "Charles V. He" do not.
    return not _INITIALS_RE.fullmatch(word) or word in ("i", "v", "x")


def split_sentences(text: str) -> list[str]:
    """Split text into sentences (bullets and markdown markers removed, whitespace trimmed)."""
    out: list[str] = []
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if line and (line[0] in "-*•·‣▪●◦–—>#(（" or line[0].isdigit()):
            bullet = _BULLET_RE.match(line)
            if bullet:
                line = line[bullet.end() :]
        line = line.replace("**", "").strip()
        if not line:
            continue
        begin = 0
        for m in _TERMINATOR_RE.finditer(line):
            if _is_boundary(line, m.start(), m.end()):
                piece = line[begin : m.end()].strip()
                if piece:
                    out.append(piece)
                begin = m.end()
        tail = line[begin:].strip()
        if tail:
            out.append(tail)
    return out


def passage_sentences(text: str) -> list[str]:
    """Cheap split for context passages: it only bounds where a claim's closest sentence is, so
    plain string replacement (no regex scan, much faster on long contexts) is good enough."""
    t = text.replace(". ", ".\n").replace("! ", "!\n").replace("? ", "?\n")
    if not t.isascii():
        for mark in "。！？；":
            t = t.replace(mark, mark + "\n")
    return [s for s in t.split("\n") if s and not s.isspace()]


_QUESTION_RE = re.compile(r"[?？][\"'”’»)\]」』）》]*$")
_LEAD_IN_RE = re.compile(r"[:：]$")
_PUNCT_RE = re.compile(r"[^\w\s']+")

# Pleasantries and sign-offs. A short sentence that starts with one of the first kind, or is
# exactly one of the second kind ("Sure!" but not "Certainly, revenue grew 5%."), is not a claim.
_PLEASANTRY_OPENINGS = (
    "hope this helps", "i hope this helps", "hope that helps", "i hope that helps", "hope it helps",
    "let me know if", "feel free to", "thank you", "thanks", "you're welcome", "you are welcome",
    "glad i could help", "happy to help", "good luck", "have a great day", "have a nice day",
    "great question", "good question",
    "希望对你有帮助", "希望這對你有幫助", "希望这对你有帮助", "希望對你有幫助", "希望能帮到你",
    "希望能幫到你", "谢谢", "謝謝", "不客气", "不客氣", "祝你好运", "祝你好運", "如有其他问题",
    "如有其他問題", "如果还有其他问题", "如果還有其他問題",
    "감사합니다", "고맙습니다", "도움이 되었으면", "도움이 되셨으면", "도움이 되길", "도움이 되기를",
    "궁금한 점이 있으면", "궁금한 점이 있으시면", "천만에요", "좋은 하루",
)
# An English opening must end at a word boundary ("thanks" is not "thanksgiving"); CJK text has none.
_PLEASANTRY_PREFIXES = tuple(p + " " if p.isascii() else p for p in _PLEASANTRY_OPENINGS)
_PLEASANTRY_WHOLE = frozenset(
    ("sure", "certainly", "absolutely", "of course", "okay", "ok", "是的", "对", "對", "嗯", "好", "好的",
     "当然", "當然", "네", "예", "물론입니다", "물론이죠")
)


def is_question(sentence: str) -> bool:
    return bool(_QUESTION_RE.search(sentence.strip()))


def is_pleasantry(sentence: str) -> bool:
    if len(sentence) > 80:
        return False
    norm = " ".join(_PUNCT_RE.sub(" ", sentence.replace("’", "'").lower()).split())
    return norm in _PLEASANTRY_WHOLE or norm in _PLEASANTRY_OPENINGS or norm.startswith(_PLEASANTRY_PREFIXES)


def is_lead_in(sentence: str) -> bool:
    """'Here is a summary:' introduces content rather than stating any."""
    return bool(_LEAD_IN_RE.search(sentence.strip()))
