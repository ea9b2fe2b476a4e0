"""Dry-run estimates: what scoring would send, from a judge that can tell without calling anything."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from faithfulness_pipeline.core.port import ExtractItem, VerdictItem


@dataclass(frozen=True, slots=True)
class CostEstimate:
    """Requests, tokens and cost a run would spend (retries not included)."""

    requests: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    notes: list[str] = field(default_factory=list)
    cached_items: int = 0  # step results already in the result store: they cost nothing
    batch_cost_usd: float | None = None  # the same requests at the provider's batch prices (None: unknown)


@runtime_checkable
class Estimating(Protocol):
    """A judge that can estimate the cost of items without sending them."""

    def estimate(self, extract: Sequence[ExtractItem], verdict: Sequence[VerdictItem]) -> CostEstimate:
        """What asking for these extraction and verdict items would cost. Verdict items may carry
        claims that are only a guess (the answer's sentences) where the claims are not extracted yet."""
        ...
