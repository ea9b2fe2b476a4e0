"""Per-step plans of the litellm judge: what one call's claim-extraction or verdict items become.

A plan answers the items that need no request, counts the others' tokens, makes their packing entries,
renders a pack into a prompt, parses and validates the reply, and turns values into results. It knows
the prompts and the reply formats but nothing of how requests are sent, retried or limited: that is the
judge's (``judge``) and the sender's (``requests``) business. What it needs to know of
its model comes in one :class:`Sizing`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Generic, TypeVar

from faithfulness_pipeline.core.port import (
    ClaimVerdict,
    ExtractItem,
    ExtractResult,
    Usage,
    VerdictItem,
    VerdictResult,
)
from faithfulness_pipeline.judging.llm import prompts
from faithfulness_pipeline.judging.llm.packing import (
    REPLY_SLACK_TOKENS,
    Count,
    Entry,
    Limits,
    Pack,
    extract_output_bound,
    largest_remainder,
    pack_entries,
    truncate_passages,
    verdict_output_bound,
)
from faithfulness_pipeline.judging.llm.parsing import ParsedReply, parse_extract_reply, parse_verdict_reply

R = TypeVar("R", ExtractResult, VerdictResult)

NO_CONTEXT_REASON: Final = "No context was provided to check this claim against."
#: How much of an unusable reply a repair message quotes back to the model.
REPAIR_QUOTE_CHARS: Final = 2000


@dataclass(frozen=True, slots=True)
class Sizing:
    """What packing needs to know of the model: its token counter, limits and the fixed prompt sizes."""

    count_tokens: Count
    limits: Limits
    frame_tokens: dict[str, int]  # tokens of a request of each step without items
    priced: bool  # whether cost can be known (else usage carries a null cost)


class Plan(Generic[R]):
    """One step's items of one call: their packing entries, prompts, parsing and results."""

    step: ClassVar[str]

    def __init__(self, sizing: Sizing, indices: Sequence[int]) -> None:
        self.sizing = sizing
        self.indices: list[int] = list(indices)
        self.entries: dict[int, Entry] = {}
        self.oversize: dict[int, str] = {}  # items that cannot be sent at all, with the reason
        self.results: dict[int, R] = {}
        zero = Usage(cost_usd=0.0 if sizing.priced else None)
        self.usage: dict[int, Usage] = dict.fromkeys(indices, zero)

    def item_id(self, i: int) -> str:
        raise NotImplementedError

    def order(self) -> list[int]:
        """The items in packing order (items that share passages next to each other)."""
        return self.indices

    def add(self, i: int) -> Entry | None:
        """Counts item ``i`` and returns its packing entry; None (and ``oversize[i]``) if it cannot go."""
        raise NotImplementedError

    def packs(self) -> list[Pack]:
        """Every item counted, then packed the way a run packs them (for the dry-run estimate)."""
        entries = [e for e in (self.add(i) for i in self.order()) if e is not None]
        return pack_entries(entries, self.sizing.frame_tokens[self.step], self.sizing.limits)

    def render(self, indices: Sequence[int]) -> tuple[list[dict[str, str]], dict[str, int], Any]:
        """``(messages, local id -> index, parse context)`` of one request."""
        raise NotImplementedError

    def shrink(self, i: int) -> bool:
        """Item ``i`` alone was refused as too long by the server (whose window is smaller than the one the
        judge knows): cut what may be cut to about half and say so on its result; False when nothing can be."""
        return False

    def response_format(self, id_map: Mapping[str, int], *, exact: bool = False) -> dict[str, Any]:
        """The JSON schema of a reply to the request whose local ids map to items as ``id_map``; ``exact``:
        spell out what parsing checks, for a server that enforces the schema as a grammar."""
        raise NotImplementedError

    def parse(self, text: str, context: Any) -> ParsedReply[Any]:
        raise NotImplementedError

    def ok_result(self, i: int, value: Any, usage: Usage) -> R:
        raise NotImplementedError

    def error_result(self, i: int, reason: str, usage: Usage) -> R:
        raise NotImplementedError

    def expected_output(self, i: int) -> int:
        raise NotImplementedError


class ExtractPlan(Plan[ExtractResult]):
    step = "extract"

    def __init__(self, sizing: Sizing, items: Sequence[ExtractItem], indices: Sequence[int]) -> None:
        super().__init__(sizing, indices)
        self.items = items
        self.sentences: dict[int, tuple[str, ...]] = {}
        self.lines: dict[int, str] = {}  # the data line under prompts.ID_SLOT, rendered once

    @staticmethod
    def free(item: ExtractItem) -> ExtractResult | None:
        """The result of an item that needs no request: an empty answer has no claims."""
        blank = item.answer is None or not item.answer.strip()
        return ExtractResult(id=item.id, claims=(), source="none") if blank else None

    def item_id(self, i: int) -> str:
        return self.items[i].id

    def add(self, i: int) -> Entry | None:
        sizing = self.sizing
        item = self.items[i]
        sentences = prompts.split_sentences(item.answer)
        line = prompts.extract_line(prompts.ID_SLOT, sentences, item.question)
        prompt = sizing.count_tokens(line) + 3
        # The data line is the answer plus a little JSON: bound the reply by it.
        bound = extract_output_bound(prompt)
        room = sizing.limits.usable_window - sizing.frame_tokens[self.step] - prompt - REPLY_SLACK_TOKENS
        if bound > room:
            # A long answer alone: the generous bound does not fit, a tight one may (claims restate
            # the answer, a little longer at most). An answer is never cut.
            if room < prompt * 5 // 4 + 16:
                self.oversize[i] = (
                    f"the answer ({prompt} tokens) is too long for the model's context window "
                    f"of {sizing.limits.context_window} tokens (--context-window, if the model's is larger)"
                )
                return None
            bound = room
        self.sentences[i] = sentences
        self.lines[i] = line
        entry = Entry(index=i, prompt_tokens=prompt, output_tokens=bound)
        self.entries[i] = entry
        return entry

    def expected_output(self, i: int) -> int:
        # The dry-run estimate: every sentence marked true or false, about 4 tokens each ("12":true,) in
        # tiktoken's count (rewritten claims cost more).
        return 4 * len(self.sentences[i]) + 4

    def render(self, indices: Sequence[int]) -> tuple[list[dict[str, str]], dict[str, int], Any]:
        ids = [prompts.local_id(n) for n in range(len(indices))]
        lines = [prompts.with_id(self.lines[i], local) for local, i in zip(ids, indices, strict=True)]
        sentences = {local: self.sentences[i] for local, i in zip(ids, indices, strict=True)}
        return prompts.extract_messages(lines, ids), dict(zip(ids, indices, strict=True)), sentences

    def response_format(self, id_map: Mapping[str, int], *, exact: bool = False) -> dict[str, Any]:
        # Always every sentence number, required, whatever ``exact`` says: unlike the verdict schema's item
        # counts, these are keywords every strict mode takes.
        return prompts.extract_response_format({local: len(self.sentences[i]) for local, i in id_map.items()})

    def parse(self, text: str, context: Any) -> ParsedReply[Any]:
        return parse_extract_reply(text, context)

    def ok_result(self, i: int, value: Any, usage: Usage) -> ExtractResult:
        return ExtractResult(id=self.items[i].id, claims=value, usage=usage)

    def error_result(self, i: int, reason: str, usage: Usage) -> ExtractResult:
        return ExtractResult(id=self.items[i].id, claims=None, error=reason, usage=usage)



class VerdictPlan(Plan[VerdictResult]):
    step = "verdict"

    def __init__(self, sizing: Sizing, items: Sequence[VerdictItem], indices: Sequence[int]) -> None:
        super().__init__(sizing, indices)
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

    @staticmethod
    def free(item: VerdictItem) -> VerdictResult | None:
        """The result of an item that needs no request: no claims, or no passages to check them against."""
        if not item.claims:
            return VerdictResult(id=item.id, verdicts=(), source="none")
        if not item.context:
            none = ClaimVerdict(verdict="unsupported", reason=NO_CONTEXT_REASON)
            return VerdictResult(id=item.id, verdicts=tuple(none for _ in item.claims), source="none")
        return None

    def item_id(self, i: int) -> str:
        return self.items[i].id

    def add(self, i: int) -> Entry | None:
        sizing = self.sizing
        count = sizing.count_tokens
        frame = sizing.frame_tokens[self.step]
        window = sizing.limits.usable_window
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
                    f"of {sizing.limits.context_window} tokens"
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

    def shrink(self, i: int) -> bool:
        # As for an item over the window the judge knows (``add``): passages are cut, never claims.
        count = self.sizing.count_tokens
        entry, claims, passages = self.entries[i], self.items[i].claims, self.passages[i]
        bare = count(prompts.verdict_line(prompts.ID_SLOT, claims, ())) + 4
        budget = (entry.prompt_tokens - bare) // 2
        cut = truncate_passages(passages, budget, count) if budget > 0 else ()
        if not cut or cut == passages:
            return False
        line = prompts.verdict_line(prompts.ID_SLOT, claims, cut)
        self.truncated.add(i)
        self.passages[i], self.lines[i] = cut, line
        self.entries[i] = Entry(i, count(line) + 4, entry.output_tokens)
        return True

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

    def response_format(self, id_map: Mapping[str, int], *, exact: bool = False) -> dict[str, Any]:
        counts = {local: len(self.items[i].claims) for local, i in id_map.items()}
        return prompts.verdict_response_format(counts, exact=exact)

    def parse(self, text: str, context: Any) -> ParsedReply[Any]:
        return parse_verdict_reply(text, context)

    def ok_result(self, i: int, value: Any, usage: Usage) -> VerdictResult:
        return VerdictResult(id=self.items[i].id, verdicts=value, usage=usage, context_truncated=i in self.truncated)

    def error_result(self, i: int, reason: str, usage: Usage) -> VerdictResult:
        return VerdictResult(
            id=self.items[i].id, verdicts=None, error=reason, usage=usage, context_truncated=i in self.truncated
        )


def share_usage(
    plan: Plan[Any],
    indices: Sequence[int],
    prompt: int,
    completion: int,
    parsed: ParsedReply[Any] | None,
    id_map: Mapping[str, int],
    cost: Callable[[int, int, int], tuple[float, float] | None],
    cached: int = 0,
) -> tuple[float, float] | None:
    """Adds one request's usage to ``plan.usage`` of the items that rode in it: prompt tokens by the items'
    prompt sizes, completion tokens by what the reply gave each (as parsed; else by prompt size), cached
    prompt tokens by the items' prompt shares, all by largest remainder so that the shares add up to the
    request; each item's cost priced from its own shares; a fractional call each. Returns the request's
    (prompt, completion) cost, None when the price is unknown."""
    n = len(indices)
    prompt_weights = [float(plan.entries[i].prompt_tokens) for i in indices]
    completion_weights = prompt_weights
    if parsed is not None and parsed.weights:
        by_index = {id_map[local]: float(w) for local, w in parsed.weights.items()}
        completion_weights = [by_index.get(i, 0.0) for i in indices]
    p_shares = largest_remainder(prompt, prompt_weights)
    c_shares = largest_remainder(completion, completion_weights)
    # Weighted by the prompt shares, no item's cached share exceeds its prompt share (cached <= prompt); a
    # prompt cached whole is shared as the prompt is, with no float rounding in the way.
    if not cached:
        k_shares = [0] * n
    elif cached == prompt:
        k_shares = list(p_shares)
    else:
        k_shares = largest_remainder(cached, [float(p) for p in p_shares])
    priced = cost(prompt, completion, cached)
    for i, p, c, k in zip(indices, p_shares, c_shares, k_shares, strict=True):
        paid: float | None = None
        if priced is not None:
            mine = cost(p, c, k)
            paid = None if mine is None else mine[0] + mine[1]
        plan.usage[i] = plan.usage[i] + Usage(llm_calls=1.0 / n, prompt_tokens=p, completion_tokens=c, cost_usd=paid,
                                              cached_prompt_tokens=k)
    return priced


def repair_messages(reply: str, why: str, *, attempt: int) -> list[dict[str, str]]:
    """The last unusable reply quoted back, then what was wrong with it and which try this is: no two
    requests of an item are the same, even when a model (or a cut) gives the same reply again."""
    quoted = reply if len(reply) <= REPAIR_QUOTE_CHARS else reply[:REPAIR_QUOTE_CHARS] + " …"
    return [
        {"role": "assistant", "content": quoted},
        {"role": "user", "content": f"That reply could not be used: {why}. Reply again with the whole JSON object, "
                                    f"following the REPLY rules exactly (try {attempt})."},
    ]
