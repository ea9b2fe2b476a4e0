"""Strict reading of judge replies, item by item, so that one bad item never spoils the others.

A reply is one JSON object keyed by the request's local ids (see ``prompts``). It is read member by member:
a reply cut short by an output limit still yields every member that was complete before the cut. Each
member is then validated on its own (strict types; every sentence of an answer named exactly once; the
verdict code grammar; the exact number of verdicts). The caller keeps ``ok`` and re-asks only for
``failed`` items. Ids the request did not contain are reported, never used. An evidence pointer that names
no passage never fails its item: ``evidence`` reads it (``1`` of an item with one passage is that passage,
the way a model counting from 1 names it; any other is dropped and the verdict kept), and the items it did
that for are named in ``pointers``. Every string taken from a reply is made valid Unicode here
(``valid_text``: a lone surrogate becomes U+FFFD), and the items whose text that changed are named in
``replaced``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from pydantic import StrictStr, TypeAdapter, ValidationError

from faithfulness_pipeline.core.port import ClaimVerdict, Verdict
from faithfulness_pipeline.judging.llm.evidence import Repair, read_evidence
from faithfulness_pipeline.judging.llm.valid_text import checked, valid_text

T = TypeVar("T")

_STRINGS: Final = TypeAdapter(list[StrictStr])


class _RepeatedKeys(dict[str, Any]):
    """A JSON object that gave some keys more than once (JSON allows it; a dict keeps only the last value)."""

    __slots__ = ("repeated",)

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        counts = Counter(k for k, _ in pairs)
        self.repeated = tuple(k for k, c in counts.items() if c > 1)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # A reply that says two things about one sentence must not be read as the last of them.
    value = dict(pairs)
    return value if len(value) == len(pairs) else _RepeatedKeys(pairs)


_DECODER: Final = json.JSONDecoder(object_pairs_hook=_object)
#: A sentence number as the prompt writes it (and a little more, to say "does not exist" of 0 or 99).
_NUMBER: Final = re.compile(r"0|[1-9][0-9]{0,5}")
_FENCE: Final = re.compile(r"^```[A-Za-z0-9_-]*\s*\n?|\n?```\s*$")
_CODE: Final = re.compile(r"\s*([SCUscu])\s*(\?)?\s*(\d+)?\s*(?:\|(.*))?", re.DOTALL)
_LETTERS: Final[dict[str, Verdict]] = {"S": "supported", "C": "contradicted", "U": "unsupported"}
_MAX_REASON_CHARS: Final = 2000

#: Deepest nesting of arrays and objects a reply may have. A valid reply nests three levels; a reply nested
#: thousands deep would exhaust the decoder's recursion limit, so it is refused before decoding, as invalid.
MAX_DEPTH: Final = 32

#: Item failures that say "the reply never covered this item" rather than "the item's part was bad".
MISSING: Final = "missing from the reply"


@dataclass(frozen=True, slots=True)
class ParsedReply(Generic[T]):
    """What one reply gave: validated items, failed items with a reason, and ids nobody asked for."""

    ok: dict[str, T]
    failed: dict[str, str]
    unknown_ids: tuple[str, ...] = ()
    complete: bool = True  # False when the JSON object was cut short or was not JSON at all
    #: reply characters per validated id: the weights for sharing a reply's completion tokens
    weights: dict[str, int] = field(default_factory=dict)
    #: validated ids whose claims or reasons hold U+FFFD: text of the reply that was not valid Unicode
    replaced: frozenset[str] = frozenset()
    #: validated ids with evidence pointers that named no passage: (read as the only passage, dropped)
    pointers: dict[str, tuple[int, int]] = field(default_factory=dict)


def read_members(text: str) -> tuple[list[tuple[str, Any, int]], bool]:
    """The ``(key, value, chars)`` members of the first JSON object in ``text``, and whether it closed.

    Tolerates code fences and prose around the object; stops at the first member that does not parse.
    """
    body = _FENCE.sub("", text.strip())
    start = body.find("{")
    if start < 0 or _too_deep(body):
        return [], False
    members: list[tuple[str, Any, int]] = []
    pos = _skip(body, start + 1)
    if pos < len(body) and body[pos] == "}":
        return members, True
    while pos < len(body):
        begin = pos
        try:
            key, pos = _DECODER.raw_decode(body, pos)
        except (json.JSONDecodeError, RecursionError):
            return members, False
        pos = _skip(body, pos)
        if not isinstance(key, str) or pos >= len(body) or body[pos] != ":":
            return members, False
        try:
            value, pos = _DECODER.raw_decode(body, _skip(body, pos + 1))
        except (json.JSONDecodeError, RecursionError):  # RecursionError: a backstop for the depth check
            return members, False
        members.append((key, value, pos - begin))
        pos = _skip(body, pos)
        if pos < len(body) and body[pos] == ",":
            pos = _skip(body, pos + 1)
            continue
        return members, pos < len(body) and body[pos] == "}"
    return members, False


def _too_deep(body: str) -> bool:
    """Whether arrays and objects nest deeper than ``MAX_DEPTH`` (brackets inside strings do not count).
    Replies with few brackets cannot, and are not scanned."""
    if body.count("[") + body.count("{") <= MAX_DEPTH:
        return False
    depth, in_string, escaped = 0, False, False
    for char in body:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif char in "]}":
            depth -= 1
    return False


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _collect(text: str, ids: Sequence[str]) -> tuple[dict[str, tuple[Any, int]], dict[str, str], tuple[str, ...], bool]:
    members, complete = read_members(text)
    wanted = set(ids)
    seen: dict[str, tuple[Any, int]] = {}
    failed: dict[str, str] = {}
    unknown: list[str] = []
    for key, value, chars in members:
        if key not in wanted:
            unknown.append(key)
        elif key in seen or key in failed:
            seen.pop(key, None)
            failed[key] = "the reply gave this id more than once"
        else:
            seen[key] = (value, chars)
    if complete:
        absent = MISSING
    elif members:
        absent = "the reply was cut short before this item"
    else:
        absent = f"the reply is not a JSON object (or nests deeper than {MAX_DEPTH} levels)"
    for i in ids:
        if i not in seen and i not in failed:
            failed[i] = absent
    return seen, failed, tuple(unknown), complete


def parse_extract_reply(text: str, sentences: Mapping[str, Sequence[str]]) -> ParsedReply[tuple[str, ...]]:
    """Claims per id, rebuilt from what the reply says of each numbered sentence.

    ``sentences[id]`` are the numbered sentences the request showed (number ``n`` is
    ``sentences[id][n - 1]``). A member is valid when it is an object with every sentence number of its
    answer as a key (``"1"``, ``"2"``, ... as the prompt wrote them) exactly once and no other key, each
    mapped to ``true`` (the sentence is one claim as written: its text is the claim), ``false`` (no claim)
    or a list of non-empty claim texts. An empty list is read as ``false``: it says "no claims" as plainly,
    and strict schemas cannot forbid it. Claims come back in sentence order, whatever the keys' order.

    A sentence missing, one that does not exist, one given twice or a value of another type fails that
    item with the reason (it is asked again): a skipped sentence is never read as "no claim". The JSON type
    alone tells a sentence kept as written (``true``) from a claim written out, even one made only of
    digits ("1990", "2"), so that a claim can never be mistaken for a sentence number.
    """
    seen, failed, unknown, complete = _collect(text, list(sentences))
    ok: dict[str, tuple[str, ...]] = {}
    weights: dict[str, int] = {}
    replaced: set[str] = set()
    for key, (value, chars) in seen.items():
        try:
            ok[key], bad = _claims(value, sentences[key])
        except ValueError as exc:
            failed[key] = str(exc)
            continue
        weights[key] = chars
        if bad:
            replaced.add(key)
    return ParsedReply(ok=ok, failed=failed, unknown_ids=unknown, complete=complete, weights=weights,
                       replaced=frozenset(replaced))


def _claims(value: Any, sentences: Sequence[str]) -> tuple[tuple[str, ...], bool]:
    """The claims, and whether a written-out one holds U+FFFD (see ``valid_text``)."""
    if not isinstance(value, dict):
        raise ValueError("claims are not an object keyed by sentence number")
    if isinstance(value, _RepeatedKeys):
        raise ValueError(f"sentence {_shown(value.repeated[0])} is given more than once")
    n = len(sentences)
    for number in value:
        if not _NUMBER.fullmatch(number):
            raise ValueError(f"key {_shown(number)} is not a sentence number")
        if not 1 <= int(number) <= n:
            raise ValueError(f"sentence {number} does not exist (the answer has {n})")
    missing = [str(k) for k in range(1, n + 1) if str(k) not in value]
    if missing:
        listed = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise ValueError(f"sentence{'s' if len(missing) > 1 else ''} {listed} missing: every sentence needs "
                         "true, false or its claims")
    claims: list[str] = []
    replaced = False
    for k, sentence in enumerate(sentences, start=1):
        entry = value[str(k)]
        if entry is True:
            claims.append(sentence)
        elif entry is False:
            continue
        elif isinstance(entry, list):
            for written in entry:
                if not isinstance(written, str):
                    raise ValueError(f"sentence {k}: a claim is not a text")
                claim, bad = checked(written.strip())
                if not claim:
                    raise ValueError(f"sentence {k}: a claim is empty")
                claims.append(claim)
                replaced = replaced or bad
        else:
            raise ValueError(f"sentence {k} is not true, false or a list of claims")
    return tuple(claims), replaced


def _shown(key: str) -> str:
    """A reply's key as a reason names it: a number as it is, anything else quoted, short and valid Unicode
    (reasons are stored and logged)."""
    if _NUMBER.fullmatch(key):
        return key
    return json.dumps(valid_text(key[:20]), ensure_ascii=False)


def parse_code(code: str, n_passages: int) -> ClaimVerdict:
    """One verdict code (``S0``, ``S?2``, ``C1|reason``, ``U?|reason``); ValueError when it is not one. An
    evidence pointer past the item's passages is read by ``evidence.read_evidence``, never refused."""
    return read_code(code, n_passages)[0]


def read_code(code: str, n_passages: int) -> tuple[ClaimVerdict, Repair | None]:
    """:func:`parse_code`, and what was done to its evidence pointer (None: nothing)."""
    match = _CODE.fullmatch(code)
    if match is None:
        raise ValueError(f"not a verdict code: {code[:40]!r}")
    letter, spec, evidence_text, reason_text = match.groups()
    verdict = _LETTERS[letter.upper()]
    evidence, repair = read_evidence(int(evidence_text) if evidence_text is not None else None, n_passages)
    reason = reason_text.strip()[:_MAX_REASON_CHARS] if reason_text is not None else None
    if not reason:
        reason = None
    if verdict != "supported" and reason is None:
        raise ValueError(f"a {verdict} verdict needs a reason")
    return ClaimVerdict(verdict=verdict, speculative=spec is not None, reason=reason, evidence=evidence), repair


def parse_verdict_reply(text: str, expected: Mapping[str, tuple[int, int]]) -> ParsedReply[tuple[ClaimVerdict, ...]]:
    """Verdicts per id; ``expected[id] = (number of claims, number of passages shown)``."""
    seen, failed, unknown, complete = _collect(text, list(expected))
    ok: dict[str, tuple[ClaimVerdict, ...]] = {}
    weights: dict[str, int] = {}
    replaced: set[str] = set()
    pointers: dict[str, tuple[int, int]] = {}
    for key, (value, chars) in seen.items():
        n_claims, n_passages = expected[key]
        try:
            codes = _STRINGS.validate_python(value, strict=True)
        except ValidationError:
            failed[key] = "verdicts are not a list of code strings"
            continue
        if len(codes) != n_claims:
            failed[key] = f"{len(codes)} verdicts for {n_claims} claims"
            continue
        valid = [checked(c) for c in codes]
        try:
            read = [read_code(c, n_passages) for c, _ in valid]
        except ValueError as exc:
            failed[key] = str(exc)
            continue
        ok[key] = tuple(verdict for verdict, _ in read)
        weights[key] = chars
        if any(bad for _, bad in valid):
            replaced.add(key)
        repairs = [repair for _, repair in read]
        if any(repairs):
            pointers[key] = (repairs.count("only_passage"), repairs.count("dropped"))
    return ParsedReply(ok=ok, failed=failed, unknown_ids=unknown, complete=complete, weights=weights,
                       replaced=frozenset(replaced), pointers=pointers)
