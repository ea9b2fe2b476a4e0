"""The run's spend cap (``judging.budget``) as the batch judge uses it.

A step's batches are all submitted at once and read hours later, so the cap cannot be held request by
request as the interactive judge holds it: each pack holds its estimated cost at batch prices when its
batch is submitted, the holds are given back and the real cost spent as batches are read, and the claims
step may hold only its part of what is left, so that the claims it pays for still have money for their
verdicts. Items the cap keeps out of every batch are remembered: the scoring pass makes them ``skipped``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from faithfulness_pipeline.core.flow import Rows, extract_items, verdict_items
from faithfulness_pipeline.core.port import CostEstimate, ExtractItem, JudgeStats, VerdictItem
from faithfulness_pipeline.judging.budget import Budget
from faithfulness_pipeline.judging.llm.card import ModelCard
from faithfulness_pipeline.judging.llm.packing import Pack, rough_sentences
from faithfulness_pipeline.judging.llm.plans import Plan

#: Answers of a run that estimate how a spend cap is shared between its claims and its verdicts.
SHARE_ROWS: Final = 2_000

#: The dry run's estimate of items (``LiteLLMJudge.estimate``).
Estimate = Callable[[Sequence[ExtractItem], Sequence[VerdictItem]], CostEstimate]


class BatchSpend:
    """The batches' holds and spending against ``budget`` (None: no cap, and every pack goes), priced with
    the batch ``card``; what the batches read cost is taken from the batch judge's ``stats``."""

    def __init__(self, budget: Budget | None, card: ModelCard, stats: JudgeStats) -> None:
        self.budget = budget
        self._card = card
        self._stats = stats
        self._held = 0.0  # what the batches submitted and not yet read hold of the budget
        self._settled_cost = 0.0  # what the batches read so far cost, as spent from the budget
        self._skipped: set[tuple[str, bytes]] = set()  # items the cap kept out of every batch
        #: the part of what is left of the cap that the step being prepaid may hold
        self.share = 1.0

    def within(self, step: str, plan: Plan[Any], keys: Sequence[bytes], packs: Sequence[Pack]) -> list[Pack]:
        """The packs the spend cap lets go, in order, each holding its estimated cost at batch prices (its
        prompt and a reply of the typical size, as the dry run prices it: a step's batches are all submitted
        at once, so holding every reply's worst case would leave most of the cap unused); from the first
        that would cross the cap (or the claims step's part of it) on, none: their items are skipped."""
        if self.budget is None:
            return list(packs)
        for n, pack in enumerate(packs):
            priced = self._card.cost(pack.prompt_tokens, sum(plan.expected_output(i) for i in pack.indices))
            worst = 0.0 if priced is None else priced[0] + priced[1]
            if not self.budget.hold(worst, self.share):
                self._skipped.update((step, keys[i]) for later in packs[n:] for i in later.indices)
                return list(packs[:n])
            self._held += worst
        return list(packs)

    def settle(self) -> None:
        """The batches read so far: their holds given back, what they really cost spent."""
        if self.budget is None:
            return
        self.budget.release(self._held)
        self._held = 0.0
        cost = self._stats.cost_usd or 0.0
        self.budget.spend(cost - self._settled_cost)
        self._settled_cost = cost

    def skipped(self, step: str, key: bytes) -> str | None:
        """Why the item of ``step`` with content ``key`` was kept out of every batch; None when it was not."""
        if self.budget is None or (step, key) not in self._skipped:
            return None
        return self.budget.reason()


def claims_share(rows: Rows, estimate: Estimate) -> float:
    """The claims step's part of the run's cost at batch prices, as the dry run estimates it (claims not
    extracted yet guessed as the answers' sentences), from the run's first ``SHARE_ROWS`` answers."""
    extract: list[ExtractItem] = []
    verdict: list[VerdictItem] = []
    for chunk in rows():
        items = extract_items(chunk)
        extract += items
        verdict += verdict_items(items, [rough_sentences(it.answer) for it in items], chunk)
        if len(extract) >= SHARE_ROWS:
            break
    claims = estimate(extract, []).batch_cost_usd or 0.0
    verdicts = estimate([], verdict).batch_cost_usd or 0.0
    return claims / (claims + verdicts) if claims + verdicts > 0 else 1.0
