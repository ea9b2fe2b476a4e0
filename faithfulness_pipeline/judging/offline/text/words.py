"""Words: Latin word splitting, stopwords and discourse words, clitics, light stemming, the cached
word -> unit map, and the Han function characters.

The lexicon below both the sentence splitter and the cues (they need its word lists and splitting) and
the content units (which need the cues): kept apart from ``units`` so that those imports run one way.
"""

from __future__ import annotations

import re

from faithfulness_pipeline.judging.offline.text.numbers import WORD_NUMBERS


def word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


_STOPWORDS = word_set(
    """a an the and or but if then else so as of at by for with about against between into through
    during before after above below to from up down in out on off over under again further once here
    there when where why how all any both each few more most other some such only own same than too
    very can will just should now i me my myself we our ours ourselves you your yours yourself
    yourselves he him his himself she her hers herself it its itself they them their theirs
    themselves what which who whom whose this that these those am is are was were be been being have
    has had having do does did doing would shall also while although though because since until unless
    whether either yet however therefore thus hence upon onto within without via per among amongst
    around across along toward towards behind beyond near like unlike said says say one ones another
    thing things something anything everything someone anyone everyone us let lets get got getting go
    goes going went gone make makes made many much lot lots really well even still ever yes yeah oh
    okay ok hey hi hello um uh ah wow am pm cannot not no never nor none neither may might could
    possibly perhaps likely probably maybe must th st nd rd almost nearly approximately roughly circa"""
)
# Words a summary or answer uses to talk about its source rather than to state facts ("The passage
# discusses ...", "Firstly, it mentions ..."): leaving them out of the content is what lets a
# faithful summary match its document.
_DISCOURSE = word_set(
    """passage article text document documents summary summarize summarizes transcript excerpt source
    speaker speakers narrator discuss discusses discussed discussion mention mentions mentioned describe
    describes described explain explains explained highlight highlights highlighted emphasize
    emphasizes emphasized outline outlines overview focus focuses focused cover covers covered detail
    details provide provides provided topic topics additionally firstly secondly thirdly finally
    furthermore moreover overall separately meanwhile respectively including include includes various
    several different certain numerous multiple main key particular specific based due regarding
    concerning individual individuals"""
)

_SKIP = _STOPWORDS | _DISCOURSE | frozenset(WORD_NUMBERS) | word_set("thousand million billion trillion bn")
_CLITICS = ("'s", "'re", "'ve", "'ll", "'d", "'m")

ZH_STOP = frozenset(
    "的了是在和与及也就都而着之其这那个们我你他她它吗呢吧啊呀嘛把被对从向于以为等将又还很更该此些地得所"
)
ZH_STOP_CHARS = "".join(sorted(ZH_STOP))

_LATIN_RE = re.compile(r"[a-zß-öø-ÿĀ-ɏ][a-zß-öø-ÿĀ-ɏ']*")
LATIN_OR_BREAK_RE = re.compile(r"[a-zß-öø-ÿĀ-ɏ][a-zß-öø-ÿĀ-ɏ']*|\n")

# ASCII text: every byte but letters, apostrophes and line breaks becomes a space, so that
# ``split`` yields the same words as ``_LATIN_RE`` at a third of the cost.
_NOT_WORD = bytes(c for c in range(128) if not (chr(c).isalpha() or chr(c) in "'\n"))
ASCII_WORDS = bytes.maketrans(_NOT_WORD, b" " * len(_NOT_WORD))
LATIN_SURFACE_RE = re.compile(r"[A-Za-zß-öø-ÿÀ-ÖØ-ÞĀ-ɏ][A-Za-zß-öø-ÿÀ-ÖØ-ÞĀ-ɏ']*")


def latin_words(lower: str) -> list[str]:
    if lower.isascii():
        return lower.encode("ascii").translate(ASCII_WORDS).decode("ascii").split()
    return _LATIN_RE.findall(lower)


def _stem(word: str) -> str:
    """Light English suffix stripping: enough to match form/formed/forming and city/cities."""
    w = word
    n = len(w)
    if n > 4 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif n > 5 and w.endswith("ing"):
        w = w[:-3]
    elif n > 4 and w.endswith(("ed", "ly")):
        w = w[:-2]
    elif n > 3 and w.endswith("es") and w[-3] in "sxzh":
        w = w[:-2]  # watches -> watch
    elif n > 3 and w.endswith("s") and w[-2] != "s":
        w = w[:-1]
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiouls":
        w = w[:-1]  # stopped -> stop
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]  # release / released -> releas
    return w


def _word_unit(word: str) -> str:
    """The unit of one lowercased word, or "" when it carries no content."""
    if "'" in word:
        if word.endswith("n't"):
            word = word[:-3]  # didn't -> did (a stopword); the negation is counted separately
        else:
            for clitic in _CLITICS:
                if word.endswith(clitic):
                    word = word[: -len(clitic)]
                    break
            word = word.replace("'", "")  # o'brien -> obrien, on both sides alike
    if word in _SKIP or len(word) < 2:
        return ""
    return _stem(word)


# word -> its unit. Set operations against this cache keep most per-word work in C. It is
# replaced (not cleared) when full, so a caller holding the old one never misses a word it added.
# The bound keeps it near 15 MB: a long run over a large vocabulary must not grow without end.
_unit_cache: dict[str, str] = {}
_UNIT_CACHE_MAX = 100_000


def word_units(words: set[str]) -> dict[str, str]:
    global _unit_cache
    cache = _unit_cache
    if len(cache) > _UNIT_CACHE_MAX:
        cache = _unit_cache = {}
    for w in words.difference(cache):
        cache[w] = _word_unit(w)
    return cache
