"""What the calls of one judge share on its event loop: the turns of counting tokens on a worker thread,
the bound on packs under way, and the head start a waiting request gets in the queue for a slot.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from faithfulness_pipeline.judging.llm.packing import Entry
from faithfulness_pipeline.judging.llm.plans import Plan

#: Counting time of one turn on the counting thread, ~20 verdict items: the packs it closes are queued
#: (and can be sent) only when the turn is over. Shorter turns cost a thread hop and a pass of the event
#: loop each; counting on the loop itself, 2 ms starved the packing on a busy machine and 8 ms kept the
#: loop's 99th percentile wait near 0.1 s. On a thread the loop is not blocked while the tokenizer runs.
TURN_S: Final = 0.008
#: How far ahead of its arrival a waiting request queues (``RequestLimiter.slot``). Extraction first:
#: its replies are what the verdict requests wait for. Then per token of its reply budget: the long
#: requests of a wave take the free slots first, so a run's last replies do not all come from long
#: packs sent last. Bounded: a request is passed only by ones that arrived at most the difference of
#: the two head starts later (about 2.5 s at most for packs of a few hundred tokens).
EXTRACTION_HEAD_START_S: Final = 2.0
HEAD_START_S_PER_TOKEN: Final = 0.001


@dataclass(frozen=True, slots=True)
class Turns:
    """What the calls of one judge share on one event loop."""

    loop: asyncio.AbstractEventLoop
    packs: asyncio.Semaphore  # packs taken off the queues and not yet answered: 2 x max_concurrency
    counting: asyncio.Lock  # held by the call whose items are being counted and packed


def count_turn(plan: Plan[Any], order: Sequence[int], start: int) -> list[Entry | None]:
    """``plan.add`` for the items of ``order`` from ``start`` on, for about ``TURN_S`` (one item at least).

    Only one call counts at a time (the judge's counting lock), so one thread at a time writes to a
    plan's per-item tables; the event loop reads only the entries of packs already closed.
    """
    until = time.perf_counter() + TURN_S
    out: list[Entry | None] = []
    for at in range(start, len(order)):
        out.append(plan.add(order[at]))
        if time.perf_counter() >= until:
            break
    return out


def head_start_s(step: str, max_tokens: int) -> float:
    extraction = EXTRACTION_HEAD_START_S if step == "extract" else 0.0
    return extraction + max_tokens * HEAD_START_S_PER_TOKEN
