"""Per-step plans of the litellm judge: what one call's claim-extraction or verdict items become.

A plan counts its items' tokens, makes their packing entries, renders a pack into a prompt, parses
and validates the reply, and turns values (fresh or stored) into results. It knows the prompts and
the reply formats but nothing of how requests are sent, retried or limited: that is the judge's
(``litellm_judge``) and the sender's (``litellm_requests``) business. The plans read a few settings of
their judge (model card, limits, token counter), hence the annotation-only import of the judge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from faithfulness_pipeline.core import prompts
from faithfulness_pipeline.core.judge import (
    ExtractItem,
    ExtractResult,
    Usage,
    VerdictItem,
    VerdictResult,
)
from faithfulness_pipeline.core.packing import (
    REPLY_SLACK_TOKENS,
    Entry,
    Pack,
    extract_output_bound,
    pack_entries,
    truncate_passages,
    verdict_output_bound,
)
from faithfulness_pipeline.core.parsing import ParsedReply, parse_extract_reply, parse_verdict_reply
from faithfulness_pipeline.judges.store import decode_claims, decode_verdicts, encode_claims, encode_verdicts

if TYPE_CHECKING:
    from faithfulness_pipeline.judges.litellm_judge import LiteLLMJudge

R = TypeVar("R", ExtractResult, VerdictResult)


class _Plan(Generic[R]):
    """One step's items of one call: their packing entries, prompts, parsing and results."""

    step: ClassVar[str]

    def __init__(self, judge: LiteLLMJudge, indices: Sequence[int], keys: Mapping[int, bytes]) -> None:
        self.judge: LiteLLMJudge = judge
        self.indices: list[int] = list(indices)
        self.keys: Mapping[int, bytes] = keys
        self.entries: dict[int, Entry] = {}
        self.oversize: dict[int, str] = {}  # items that cannot be sent at all, with the reason
        self.results: dict[int, R] = {}
        zero = Usage(cost_usd=0.0 if judge.card.priced else None)
        self.usage: dict[int, Usage] = dict.fromkeys(indices, zero)

    def order(self) -> list[int]:
        """The items in packing order (items that share passages next to each other)."""
        return self.indices

    def add(self, i: int) -> Entry | None:
        """Counts item ``i`` and returns its packing entry; None (and ``oversize[i]``) if it cannot go."""
        raise NotImplementedError

    def packs(self) -> list[Pack]:
        """Every item counted, then packed the way a run packs them (for the dry-run estimate)."""
        entries = [e for e in (self.add(i) for i in self.order()) if e is not None]
        return pack_entries(entries, self.judge.frame_tokens[self.step], self.judge.limits)

    def render(self, indices: Sequence[int]) -> tuple[list[dict[str, str]], dict[str, int], Any]:
        """``(messages, local id -> index, parse context)`` of one request."""
        raise NotImplementedError

    def response_format(self, ids: Sequence[str]) -> dict[str, Any]:
        raise NotImplementedError

    def parse(self, text: str, context: Any) -> ParsedReply[Any]:
        raise NotImplementedError

    def ok_result(self, i: int, value: Any, usage: Usage) -> R:
        raise NotImplementedError

    def error_result(self, i: int, reason: str, usage: Usage) -> R:
        raise NotImplementedError

    def encode(self, i: int, value: Any, usage: Usage) -> str:
        raise NotImplementedError

    def stored_result(self, i: int, value: str) -> R | None:
        """Item ``i``'s result from its stored value; None if the value is unreadable (then it is re-asked)."""
        raise NotImplementedError

    def expected_output(self, i: int) -> int:
        raise NotImplementedError


class _ExtractPlan(_Plan[ExtractResult]):
    step = "extract"

    def __init__(
        self,
        judge: LiteLLMJudge,
        items: Sequence[ExtractItem],
        indices: Sequence[int],
        keys: Mapping[int, bytes],
    ) -> None:
        super().__init__(judge, indices, keys)
        self.items = items
        self.sentences: dict[int, tuple[str, ...]] = {}
        self.lines: dict[int, str] = {}  # the data line under prompts.ID_SLOT, rendered once

    def add(self, i: int) -> Entry | None:
        judge = self.judge
        item = self.items[i]
        sentences = prompts.split_sentences(item.answer)
        line = prompts.extract_line(prompts.ID_SLOT, sentences, _question(item.question))
        prompt = judge.count_tokens(line) + 3
        # The data line is the answer plus a little JSON: bound the reply by it.
        bound = extract_output_bound(prompt)
        room = judge.limits.usable_window - judge.frame_tokens[self.step] - prompt - REPLY_SLACK_TOKENS
        if bound > room:
            # A long answer alone: the generous bound does not fit, a tight one may (claims restate
            # the answer, a little longer at most). An answer is never cut.
            if room < prompt * 5 // 4 + 16:
                self.oversize[i] = (
                    f"the answer ({prompt} tokens) is too long for the model's context window "
                    f"of {judge.limits.context_window} tokens"
                )
                return None
            bound = room
        self.sentences[i] = sentences
        self.lines[i] = line
        entry = Entry(index=i, prompt_tokens=prompt, output_tokens=bound)
        self.entries[i] = entry
        return entry

    def expected_output(self, i: int) -> int:
        # The dry-run estimate: every sentence given back by its number (rewritten claims cost more).
        return 2 * len(self.sentences[i]) + 4

    def render(self, indices: Sequence[int]) -> tuple[list[dict[str, str]], dict[str, int], Any]:
        ids = [prompts.local_id(n) for n in range(len(indices))]
        lines = [prompts.with_id(self.lines[i], local) for local, i in zip(ids, indices, strict=True)]
        sentences = {local: self.sentences[i] for local, i in zip(ids, indices, strict=True)}
        return prompts.extract_messages(lines, ids), dict(zip(ids, indices, strict=True)), sentences

    def response_format(self, ids: Sequence[str]) -> dict[str, Any]:
        return prompts.extract_response_format(ids)

    def parse(self, text: str, context: Any) -> ParsedReply[Any]:
        return parse_extract_reply(text, context)

    def ok_result(self, i: int, value: Any, usage: Usage) -> ExtractResult:
        return ExtractResult(id=self.items[i].id, claims=value, usage=usage)

    def error_result(self, i: int, reason: str, usage: Usage) -> ExtractResult:
        return ExtractResult(id=self.items[i].id, claims=None, error=reason, usage=usage)

    def encode(self, i: int, value: Any, usage: Usage) -> str:
        return encode_claims(value, usage)

    def stored_result(self, i: int, value: str) -> ExtractResult | None:
        return _stored_extract(self.judge, self.items[i], value)


class _VerdictPlan(_Plan[VerdictResult]):
    step = "verdict"

    def __init__(
        self,
        judge: LiteLLMJudge,
        items: Sequence[VerdictItem],
        indices: Sequence[int],
        keys: Mapping[int, bytes],
    ) -> None:
        super().__init__(judge, indices, keys)
        self.items = items
        self.passages: dict[int, tuple[str, ...]] = {}
        self.lines: dict[int, str] = {}  # the data line with passages under prompts.ID_SLOT, rendered once
        self.truncated: set[int] = set()
        self.group_of: dict[int, int] = {}
        self.group_size: dict[int, int] = {}

    def order(self) -> list[int]:
        # Rows with equal passages (a static context) travel together: later ones refer back.
        groups: dict[tuple[str, ...], int] = {}
        members: dict[int, list[int]] = {}
        for i in self.indices:
            g = groups.setdefault(tuple(self.items[i].context), len(groups))
            self.group_of[i] = g
            members.setdefault(g, []).append(i)
        self.group_size = {g: len(m) for g, m in members.items()}
        if len(groups) == len(self.indices):
            return self.indices
        return [i for m in members.values() for i in m]

    def add(self, i: int) -> Entry | None:
        judge = self.judge
        count = judge.count_tokens
        frame = judge.frame_tokens[self.step]
        window = judge.limits.usable_window
        claims = self.items[i].claims
        passages = tuple(self.items[i].context)
        group = self.group_of.get(i)
        bound = verdict_output_bound(len(claims))
        tight = 12 * len(claims) + 8  # codes without many reasons: the least a reply can need
        line = prompts.verdict_line(prompts.ID_SLOT, claims, passages)
        cost = count(line) + 4
        room = window - frame - cost - REPLY_SLACK_TOKENS
        if bound > room and room >= tight:
            bound = room
        elif bound > room:
            # Only an item that alone exceeds the window is cut, and its result says so.
            bare = count(prompts.verdict_line(prompts.ID_SLOT, claims, ())) + 4
            budget = window - frame - bare - REPLY_SLACK_TOKENS - tight
            passages = truncate_passages(passages, budget, count) if budget > 0 else ()
            if not passages:
                self.oversize[i] = (
                    "the claims alone are too long for the model's context window "
                    f"of {judge.limits.context_window} tokens"
                )
                return None
            self.truncated.add(i)
            group = None  # its passages are its own now
            line = prompts.verdict_line(prompts.ID_SLOT, claims, passages)
            cost = count(line) + 4
            bound = max(tight, window - frame - cost - REPLY_SLACK_TOKENS)
        shared = None
        if group is not None and self.group_size.get(group, 1) > 1:
            shared = count(prompts.verdict_line(prompts.ID_SLOT, claims, None, passages_of=prompts.ID_SLOT)) + 4
        self.passages[i] = passages
        self.lines[i] = line
        entry = Entry(i, cost, bound, group, shared)
        self.entries[i] = entry
        return entry

    def expected_output(self, i: int) -> int:
        # A code is ~3 tokens; about one claim in five needs a reason of ~12 tokens.
        return 6 * len(self.items[i].claims) + 2

    def render(self, indices: Sequence[int]) -> tuple[list[dict[str, str]], dict[str, int], Any]:
        ids = [prompts.local_id(n) for n in range(len(indices))]
        lines: list[str] = []
        first_of: dict[tuple[str, ...], str] = {}
        expected: dict[str, tuple[int, int]] = {}
        for local, i in zip(ids, indices, strict=True):
            passages, claims = self.passages[i], self.items[i].claims
            ref = first_of.setdefault(passages, local)
            if ref == local:
                lines.append(prompts.with_id(self.lines[i], local))
            else:
                lines.append(prompts.verdict_line(local, claims, None, passages_of=ref))
            expected[local] = (len(claims), len(passages))
        counts = {local: n for local, (n, _) in expected.items()}
        return prompts.verdict_messages(lines, counts), dict(zip(ids, indices, strict=True)), expected

    def response_format(self, ids: Sequence[str]) -> dict[str, Any]:
        return prompts.verdict_response_format(ids)

    def parse(self, text: str, context: Any) -> ParsedReply[Any]:
        return parse_verdict_reply(text, context)

    def ok_result(self, i: int, value: Any, usage: Usage) -> VerdictResult:
        return VerdictResult(id=self.items[i].id, verdicts=value, usage=usage, context_truncated=i in self.truncated)

    def error_result(self, i: int, reason: str, usage: Usage) -> VerdictResult:
        return VerdictResult(
            id=self.items[i].id, verdicts=None, error=reason, usage=usage, context_truncated=i in self.truncated
        )

    def encode(self, i: int, value: Any, usage: Usage) -> str:
        return encode_verdicts(value, usage, i in self.truncated)

    def stored_result(self, i: int, value: str) -> VerdictResult | None:
        return _stored_verdicts(self.judge, self.items[i], value)


def _stored_extract(judge: LiteLLMJudge, item: ExtractItem, value: str | None) -> ExtractResult | None:
    decoded = judge._decoded(decode_claims, value)
    return None if decoded is None else ExtractResult(item.id, decoded[0], None, decoded[1], True)


def _stored_verdicts(judge: LiteLLMJudge, item: VerdictItem, value: str | None) -> VerdictResult | None:
    decoded = judge._decoded(decode_verdicts, value)
    if decoded is None:
        return None
    verdicts, usage, cut = decoded
    return VerdictResult(item.id, verdicts, None, usage, True, cut)


def _question(question: str | None) -> str | None:
    return question if question is not None and question.strip() else None

