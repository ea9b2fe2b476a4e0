"""A scripted judge behind the fake server: it reads OUR prompts (both steps) and answers predictably.

Script:
* extraction: the prompt shows each answer as numbered sentences, and the reply marks every one: by
  default ``true``, the sentence is one claim as written (what a model does with a RAG answer whose
  sentences are already atomic). ``rewrites`` maps a sentence to the claims to write out for it instead
  (a list; an empty one makes it ``false``, no claim, like a question or a greeting);
* the verdict code of a claim comes from ``codes`` (claim -> code) when given, else from markers in the
  claim: ``[C]`` contradicted, ``[U?]`` unsupported + speculative, ``[U]`` unsupported, ``[S?]``
  supported + speculative, otherwise supported; evidence is passage 0 for S and C.
  ``grounded=True`` judges unmarked claims against the passages instead (for benchmarks on
  ``bench/rag_rows`` rows): a claim found verbatim in a passage is supported by it, one that matches a
  passage sentence except for its numbers is contradicted, anything else unsupported, each with a reason.

``script_claims`` / ``script_verdicts`` give what the script answers, for tests to compare with.

Misbehaviour on purpose, to test salvage: ``misbehave`` maps a marker to a mode; an item whose answer
(extraction) or claims (verdicts) contain the marker is answered wrongly the first ``times`` times it is
seen. Modes: ``drop`` (left out of the reply), ``invent`` (answered under an id nobody asked for),
``wrong_count`` (one verdict too few; extraction: the last sentence left out, as small models skipped
sentences), ``bad_code`` (an invalid code; extraction: a sentence number that does not exist). Two modes
answer with text that is not valid Unicode, a lone UTF-16 surrogate (half an emoji, :data:`CUT_EMOJI`) at
the end of every claim or verdict reason (extraction: every claim written out, none kept as ``true``):
``surrogate`` writes it as the JSON escape ``\\ud83d`` inside the reply (what a model in JSON mode emits),
``raw_surrogate`` puts it in the reply's content itself (the provider's JSON then carries the escape).
``extracts_nothing=True`` answers every extraction with no claims (every sentence ``false``), as a small
model was seen to do for every answer.

Every request is recorded in ``calls`` (step and the items' texts) for assertions.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from faithfulness_pipeline.testing.fakellm.wire import ChatRequest

if TYPE_CHECKING:
    import polars as pl

DATA_OPEN = "<<<DATA>>>"
DATA_CLOSE = "<<<END DATA>>>"
_SPLIT = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*|\n+")
SCRIPTED_REASON = "Scripted: the passages do not back this claim."
#: The first half of the surrogate pair of U+1F600, alone: what a model writes when it stops inside an emoji.
CUT_EMOJI = "\ud83d"


def script_sentences(answer: str) -> list[str]:
    """Sentences by punctuation: an independent statement of how typical rows split into sentences."""
    return [s.strip() for s in _SPLIT.split(answer) if s and s.strip()]


def script_claims(answer: str, rewrites: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """The claims the script extracts from ``answer``: its sentences, with ``rewrites`` applied."""
    out: list[str] = []
    for sentence in script_sentences(answer):
        out.extend(rewrites[sentence] if rewrites and sentence in rewrites else [sentence])
    return out


def script_code(claim: str, codes: Mapping[str, str] | None = None) -> str:
    if codes is not None and claim in codes:
        return codes[claim]
    if "[C]" in claim:
        return f"C0|{SCRIPTED_REASON}"
    if "[U?]" in claim:
        return f"U?|{SCRIPTED_REASON}"
    if "[U]" in claim:
        return f"U|{SCRIPTED_REASON}"
    if "[S?]" in claim:
        return "S?0"
    return "S0"


def script_verdicts(claims: list[str] | tuple[str, ...]) -> list[tuple[str, bool, int | None, str | None]]:
    """``(verdict, speculative, evidence, reason)`` per claim, as the judge should report them."""
    names = {"S": "supported", "C": "contradicted", "U": "unsupported"}
    out: list[tuple[str, bool, int | None, str | None]] = []
    for claim in claims:
        code = script_code(claim)
        head, _, reason = code.partition("|")
        evidence = int(head.lstrip("SCU?")) if head.lstrip("SCU?") else None
        out.append((names[head[0]], "?" in head, evidence, reason or None))
    return out


@dataclass(frozen=True)
class ScriptedCall:
    step: str  # "extract" | "verdict"
    texts: tuple[str, ...]  # the answers (extract) or the first claim of each item (verdict)


class ScriptedJudge:
    """A Responder (``Callable[[ChatRequest], str]``) for ``FakeLLMServer``.

    ``write_out_rate`` (0..1) is the share of kept sentences the script writes out as text instead of
    marking ``true`` (same claim text, chosen by a hash of the sentence): it models the reply cost of
    a judge that rewrites some claims, without changing any claim.
    """

    def __init__(
        self,
        codes: Mapping[str, str] | None = None,
        misbehave: Mapping[str, str] | None = None,
        times: int = 1,
        *,
        rewrites: Mapping[str, Sequence[str]] | None = None,
        grounded: bool = False,
        write_out_rate: float = 0.0,
        extracts_nothing: bool = False,
    ) -> None:
        self.codes = dict(codes) if codes else None
        self.misbehave = dict(misbehave or {})
        self.times = times
        self.rewrites = {k: list(v) for k, v in (rewrites or {}).items()}
        self.grounded = grounded
        self.write_out_rate = write_out_rate
        self.extracts_nothing = extracts_nothing
        self.calls: list[ScriptedCall] = []
        self._done: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def __call__(self, request: ChatRequest) -> str:
        items = _data_items(request)
        step = "extract" if items and "sentences" in items[0] else "verdict"
        reply: dict[str, Any] = {}
        texts: list[str] = []
        escaped = False
        for item in items:
            value: Any  # extraction: sentence number -> true | false | claims; verdicts: the codes
            if step == "extract":
                sentences = [str(s) for s in item["sentences"].values()]
                text = " ".join(sentences)
                value = self._claims(sentences)
                texts.append(text)
            else:
                claims = [str(c) for c in item["claims"]]
                text = "\n".join(claims)
                passages = [str(p) for p in (item.get("passages") or {}).values()]
                if "passages_of" in item:
                    passages = self._passages_of(items, str(item["passages_of"]))
                value = [self._code(c, passages) for c in claims]
                texts.append(claims[0] if claims else "")
            mode = self._mode(step, text)
            key = str(item["id"])
            if mode == "drop":
                continue
            if mode == "invent":
                key = f"zz{key}"
            elif mode == "wrong_count":
                value = value[:-1] if step == "verdict" else dict(list(value.items())[:-1])
            elif mode == "bad_code":
                value = ["X!" for _ in value] if step == "verdict" else {**value, str(len(value) + 1): True}
            elif mode in ("surrogate", "raw_surrogate"):
                escaped = escaped or mode == "surrogate"
                if step == "verdict":
                    value = [f"{c}{'|' if '|' not in c else ''} cut {CUT_EMOJI}" for c in value]
                else:
                    value = {n: _cut(sentences[int(n) - 1], v) for n, v in value.items()}
            reply[key] = value
        with self._lock:
            self.calls.append(ScriptedCall(step, tuple(texts)))
        text = json.dumps(reply, ensure_ascii=False, separators=(",", ":"))
        # The escape in the reply's own JSON, as a model writes it (the raw character is the other mode).
        return text.replace(CUT_EMOJI, "\\ud83d") if escaped else text

    def _claims(self, sentences: list[str]) -> dict[str, bool | list[str]]:
        out: dict[str, bool | list[str]] = {}
        for n, sentence in enumerate(sentences, start=1):
            if self.extracts_nothing:
                out[str(n)] = False
            elif sentence in self.rewrites:
                out[str(n)] = list(self.rewrites[sentence]) or False
            elif self.write_out_rate and _unit(sentence) < self.write_out_rate:
                out[str(n)] = [sentence]
            else:
                out[str(n)] = True
        return out

    @staticmethod
    def _passages_of(items: list[dict[str, Any]], ref: str) -> list[str]:
        first = next(it for it in items if str(it["id"]) == ref)
        return [str(p) for p in first["passages"].values()]

    def _code(self, claim: str, passages: list[str]) -> str:
        if self.codes is not None and claim in self.codes:
            return self.codes[claim]
        if not self.grounded or any(m in claim for m in _MARKERS):
            return script_code(claim, None)
        return grounded_code(claim, passages)

    def _mode(self, step: str, text: str) -> str | None:
        for marker, mode in self.misbehave.items():
            if marker in text:
                with self._lock:
                    seen = self._done.get((step, text), 0)
                    if seen >= self.times:
                        return None
                    self._done[(step, text)] = seen + 1
                return mode
        return None


def _cut(sentence: str, value: bool | list[str]) -> bool | list[str]:
    """A sentence's extraction value with every claim written out and ending in half an emoji."""
    if value is False:
        return False
    return [f"{c} {CUT_EMOJI}" for c in ([sentence] if value is True else value)]


def _unit(text: str) -> float:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") / 2**64


_DIGITS = re.compile(r"\d+")


def grounded_code(claim: str, passages: Sequence[str]) -> str:
    """A verdict code from the passages, the way a careful judge would give it on ``bench/rag_rows`` rows."""
    for k, passage in enumerate(passages):
        if claim in passage:
            return f"S{k}"
    shape = _DIGITS.sub("#", claim)
    for k, passage in enumerate(passages):
        for sentence in _SENTENCES_IN_PASSAGE.findall(passage):
            if _DIGITS.sub("#", sentence.strip()) == shape:
                said = [n for n in _DIGITS.findall(sentence) if n not in _DIGITS.findall(claim)]
                return f"C{k}|{_reason(claim, 'contradicted', k, said[0] if said else '')}"
    return f"U|{_reason(claim, 'unsupported', 0, '')}"


_SENTENCES_IN_PASSAGE = re.compile(r"[^.。]+[.。]")


def _lang(text: str) -> str:
    if any("\uac00" <= ch <= "\ud7a3" for ch in text):
        return "ko"
    if any("\u4e00" <= ch <= "\u9fff" for ch in text):
        return "zh"
    return "en"


def _reason(claim: str, kind: str, passage: int, number: str) -> str:
    # Short reasons in the claim's language, like a judge following the prompt would write them.
    lang = _lang(claim)
    if kind == "contradicted":
        return {
            "en": f"Passage {passage} gives {number} instead.",
            "zh": f"段落{passage}给出的是{number}。",
            "ko": f"단락 {passage}에는 {number}로 나온다.",
        }[lang]
    return {"en": "No passage mentions this.", "zh": "段落中没有提到这一点。", "ko": "단락에 언급이 없다."}[lang]


def _data_items(request: ChatRequest) -> list[dict[str, Any]]:
    # The user message with the DATA section; a repair request adds a later one that only says what was wrong.
    user = next((m for m in request.messages if m.get("role") == "user" and DATA_OPEN in str(m.get("content"))), None)
    if user is None or not isinstance(user.get("content"), str):
        raise ValueError("no user message with a DATA section")
    content: str = user["content"]
    start = content.index(DATA_OPEN) + len(DATA_OPEN)
    end = content.index(DATA_CLOSE, start)
    return [json.loads(line) for line in content[start:end].splitlines() if line.strip()]


# ------------------------------------------------------------------------------------ typical rows

_EN_TEXT = (
    "the city council approved a new budget for public transport after months of debate about rising costs "
    "and the mayor said that bus routes would expand to three northern districts while rail fares stay "
    "unchanged until next spring because ridership grew faster than expected during the summer season when "
    "tourists visited museums parks harbours and old markets near the river station company report shows "
    "revenue increased by twelve percent compared with last year although energy prices remained high for "
    "most households researchers measured water quality at several sites and found lower levels of nitrate"
)
_EN_WORDS = _EN_TEXT.split()
_ZH_CHARS = (
    "市议会在经过数月讨论后批准了新的公共交通预算市长表示公交线路将扩展到北部三个地区而铁路票价在明年春天之前保持不变"
    "因为夏季客流量增长快于预期游客参观了博物馆公园港口和河边的老市场公司报告显示收入比去年增长百分之十二研究人员在多个地点测量水质"
)
_KO_TEXT = (
    "시의회는 몇 달간의 논의 끝에 대중교통 예산을 승인했으며 시장은 버스 노선이 북부 세 지역으로 확대되고 철도 요금은 "
    "내년 봄까지 동결된다고 밝혔다 여름철 이용객이 예상보다 빠르게 늘었고 관광객들은 박물관과 공원 항구 강변 시장을 "
    "방문했다 회사 보고서에 따르면 매출은 작년보다 십이 퍼센트 증가했으며 연구진은 여러 지점에서 수질을 측정했다"
)
_KO_WORDS = _KO_TEXT.split()
_MARKERS = ("[C]", "[U]", "[S?]", "[U?]")


@dataclass(frozen=True)
class TypicalRow:
    lang: str
    question: str
    answer: str
    context: tuple[str, ...]
    claims: tuple[str, ...]  # what the script extracts from the answer


def _sentence(rng: Any, lang: str, words: int, marker: str | None) -> str:
    if lang == "en":
        body = " ".join(rng.choice(_EN_WORDS) for _ in range(words))
        text = body[0].upper() + body[1:]
        return f"{text} {marker}." if marker else f"{text}."
    if lang == "zh":
        body = "".join(rng.choice(_ZH_CHARS) for _ in range(int(words * 1.6)))
        return f"{body}{marker or ''}。"
    body = " ".join(rng.choice(_KO_WORDS) for _ in range(words))
    return f"{body} {marker}." if marker else f"{body}다."


def _passage(rng: Any, lang: str, words: int) -> str:
    parts: list[str] = []
    left = words
    while left > 0:
        n = min(left, rng.randint(10, 20))
        parts.append(_sentence(rng, lang, n, None))
        left -= n
    return ("" if lang == "zh" else " ").join(parts)


def typical_rows(
    n: int, *, seed: int = 0, langs: tuple[str, ...] = ("en", "zh", "ko"), marker_rate: float = 0.25
) -> list[TypicalRow]:
    """Typical RAG rows: 3-6 sentence answers, 3-8 passages of 60-150 words, languages in turn.

    A share ``marker_rate`` of the answer sentences carries a verdict marker for the script.
    """
    import random

    rng = random.Random(seed)
    rows: list[TypicalRow] = []
    for k in range(n):
        lang = langs[k % len(langs)]
        sentences = [
            _sentence(rng, lang, rng.randint(12, 20), rng.choice(_MARKERS) if rng.random() < marker_rate else None)
            for _ in range(rng.randint(3, 6))
        ]
        answer = ("" if lang == "zh" else " ").join(sentences)
        context = tuple(_passage(rng, lang, rng.randint(60, 150)) for _ in range(rng.randint(3, 8)))
        question = _sentence(rng, lang, rng.randint(6, 12), None)[:-1] + ("？" if lang == "zh" else "?")
        rows.append(TypicalRow(lang, question, answer, context, tuple(script_claims(answer))))
    return rows


def typical_frame(n: int, *, seed: int = 0, ids: str = "c{:05d}") -> pl.DataFrame:
    """:func:`typical_rows` as the flat table the pipeline takes: ``ids`` formats each row's conversation_id."""
    import polars as pl

    rows = typical_rows(n, seed=seed)
    return pl.DataFrame({
        "conversation_id": [ids.format(k) for k in range(n)],
        "input": [r.question for r in rows],
        "output": [r.answer for r in rows],
        "context": [list(r.context) for r in rows],
    })


#: A ready responder instance for subprocess servers:
#: ``python -m faithfulness_pipeline.testing.fakellm --responder faithfulness_pipeline.testing.scripted:RESPONDER``.
RESPONDER = ScriptedJudge()
#: The same, judging unmarked claims against the passages (realistic reasons on ``bench/rag_rows`` rows).
GROUNDED_RESPONDER = ScriptedJudge(grounded=True)
