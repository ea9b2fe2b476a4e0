"""Packing items into requests under token budgets, and sharing a request's usage out over its items.

Pure: token counts come in as numbers or through a ``count(text) -> int`` function supplied by the
caller (the litellm judge passes litellm's offline tokenizer), so this module needs no model library.

A pack is closed when the next item would push it over any of: the prompt budget (``pack_tokens``,
the fixed instructions included), the item cap, the model's output limit, or the model's context window
(prompt plus the reply it may need). An item bigger than ``pack_tokens`` alone travels alone. Nothing is
ever cut to make a pack fit; only an item that alone exceeds the model's window has its passages
truncated (``truncate_passages``), and the caller marks that row.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from faithfulness_pipeline.judging.llm.prompts import split_sentences

Count = Callable[[str], int]

#: Reply tokens allowed per request beyond the per-item bounds (the braces, fences a model may add).
REPLY_SLACK_TOKENS: Final = 64
#: Kept free in the context window on top of the estimates: tokenizers of other vendors differ a little.
WINDOW_MARGIN: Final = 0.05


@dataclass(frozen=True, slots=True)
class Limits:
    pack_tokens: int  # prompt tokens per request, instructions included (soft for a single big item)
    max_items: int  # items per request
    context_window: int  # the model's input window (prompt + reply must fit)
    max_output_tokens: int  # the model's output limit

    def __post_init__(self) -> None:
        if min(self.pack_tokens, self.max_items, self.context_window, self.max_output_tokens) < 1:
            raise ValueError(f"all limits must be >= 1: {self}")

    @property
    def usable_window(self) -> int:
        return int(self.context_window * (1 - WINDOW_MARGIN))


@dataclass(frozen=True, slots=True)
class Entry:
    """One item as packing sees it."""

    index: int  # position in the caller's item list
    prompt_tokens: int  # its data line and its part of the reply hint
    output_tokens: int  # an upper bound of its part of the reply
    #: items with the same group have equal passages: after the first, the rest of a pack refers to them
    group: int | None = None
    shared_prompt_tokens: int | None = None  # its cost when its group is already in the pack


@dataclass(frozen=True, slots=True)
class Pack:
    indices: tuple[int, ...]
    prompt_tokens: int  # estimate, fixed instructions included
    output_tokens: int  # upper bound for the reply: what the request's max_tokens is set to


class Packer:
    """Greedy packing in arrival order, one entry at a time, so that requests can leave while later
    items are still being counted. Items of one group that arrive together share their passages.

    Packs depend on the items alone (not on concurrency or timing), and greedily in order: a re-run
    that resumes after a crash re-packs the unfinished tail of a step into the same packs, so every
    row's share of the usage comes out the same as in an uninterrupted run.
    """

    def __init__(self, frame_tokens: int, limits: Limits) -> None:
        self.frame_tokens = frame_tokens
        self.limits = limits
        self._current: list[int] = []
        self._groups: set[int] = set()
        self._prompt = frame_tokens
        self._output = REPLY_SLACK_TOKENS

    def push(self, entry: Entry) -> Pack | None:
        """Adds ``entry``; returns the pack it closed (the one before it) when it did not fit there."""
        closed: Pack | None = None
        cost = _cost(entry, self._groups)
        limits = self.limits
        fits = (
            len(self._current) < limits.max_items
            and self._prompt + cost <= limits.pack_tokens
            and self._output + entry.output_tokens <= limits.max_output_tokens
            and self._prompt + cost + self._output + entry.output_tokens <= limits.usable_window
        )
        if self._current and not fits:
            closed = self.flush()
            cost = entry.prompt_tokens
        self._current.append(entry.index)
        if entry.group is not None:
            self._groups.add(entry.group)
        self._prompt += cost
        self._output += entry.output_tokens
        return closed

    def flush(self) -> Pack | None:
        """Closes the open pack, if any."""
        if not self._current:
            return None
        pack = Pack(tuple(self._current), self._prompt, min(self._output, self.limits.max_output_tokens))
        self._current, self._groups = [], set()
        self._prompt, self._output = self.frame_tokens, REPLY_SLACK_TOKENS
        return pack


def _cost(entry: Entry, groups: set[int]) -> int:
    if entry.group is not None and entry.group in groups and entry.shared_prompt_tokens is not None:
        return entry.shared_prompt_tokens
    return entry.prompt_tokens


def pack_entries(entries: Sequence[Entry], frame_tokens: int, limits: Limits) -> list[Pack]:
    """Greedy packing in input order, with items of one group kept together (they share passages)."""
    packer = Packer(frame_tokens, limits)
    packs = [p for p in (packer.push(e) for e in grouped(entries)) if p is not None]
    last = packer.flush()
    return [*packs, last] if last is not None else packs


def grouped(entries: Sequence[Entry]) -> list[Entry]:
    """``entries`` with the members of each group moved next to its first member."""
    members: dict[int, list[Entry]] = {}
    for e in entries:
        if e.group is not None:
            members.setdefault(e.group, []).append(e)
    if not members or all(len(m) == 1 for m in members.values()):
        return list(entries)
    out: list[Entry] = []
    placed: set[int] = set()
    for e in entries:
        if e.group is None:
            out.append(e)
        elif e.group not in placed:
            placed.add(e.group)
            out.extend(members[e.group])
    return out


def halves(indices: Sequence[int]) -> list[tuple[int, ...]]:
    """A pack split in two (a single item stays one pack)."""
    if len(indices) <= 1:
        return [tuple(indices)]
    mid = (len(indices) + 1) // 2
    return [tuple(indices[:mid]), tuple(indices[mid:])]


def extract_output_bound(answer_tokens: int) -> int:
    """Reply tokens an answer's claims may take if every one is written out (atomic claims repeat
    their subjects: half as much again as the answer). Replies that mark sentences true or false need a
    fraction of it; one cut short by this bound keeps what it completed and re-asks for the rest."""
    return 3 * answer_tokens // 2 + 16


def verdict_output_bound(n_claims: int) -> int:
    """Reply tokens for one item's verdict codes, every one with a reason."""
    return 40 * n_claims + 8


def truncate_passages(passages: Sequence[str], budget_tokens: int, count: Count) -> tuple[str, ...]:
    """The longest prefix of the passages that fits ``budget_tokens``; the last kept one may be cut."""
    kept: list[str] = []
    used = 0
    for passage in passages:
        cost = count(passage) + 4  # its key, quotes and separator in the data line
        if used + cost <= budget_tokens:
            kept.append(passage)
            used += cost
            continue
        room = budget_tokens - used - 4
        if room > 0:
            cut = _cut_to_tokens(passage, room, count)
            if cut:
                kept.append(cut)
        break
    return tuple(kept)


def _cut_to_tokens(text: str, limit: int, count: Count) -> str:
    lo, hi = 0, len(text)
    while lo < hi:  # the longest prefix (in characters) that counts <= limit tokens
        mid = (lo + hi + 1) // 2
        if count(text[:mid]) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def largest_remainder(total: int, weights: Sequence[float]) -> list[int]:
    """Integer shares of ``total`` proportional to ``weights`` that add up to ``total`` exactly."""
    n = len(weights)
    if n == 0:
        return []
    clean = [w if w > 0 and math.isfinite(w) else 0.0 for w in weights]
    weight_sum = sum(clean)
    if weight_sum <= 0:
        clean, weight_sum = [1.0] * n, float(n)
    exact = [total * w / weight_sum for w in clean]
    shares = [math.floor(x) for x in exact]
    left = total - sum(shares)
    # Ties go to the earlier item so that the split is deterministic.
    order = sorted(range(n), key=lambda i: (-(exact[i] - shares[i]), i))
    for i in order[:left]:
        shares[i] += 1
    return shares


def rough_sentences(text: str) -> list[str]:
    """The answer's sentences as the extraction prompt numbers them: an estimate of its claims."""
    return list(split_sentences(text))
