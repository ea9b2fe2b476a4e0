"""What a run's event log says about the `llm_judge` pool: when each LLM step ran, and how often a step
was held back by the pool. Read from any instance storage (SQLite or PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import dagster as dg
from dagster import DagsterEventType

POOL = "llm_judge"
#: The steps that call the judge: a day's shard steps (claims_and_verdicts.judge_shard[shard_0], ...).
LLM_STEP = "claims_and_verdicts.judge_shard"


def is_llm_step(step_key: str | None) -> bool:
    return step_key is not None and step_key.startswith(LLM_STEP)


@dataclass
class PoolUse:
    """The LLM steps of some runs: (start, end) timestamps of each finished step, the steps still open
    (started, never ended: a killed run), and the engine events naming the pool (a step waiting for it)."""

    intervals: list[tuple[float, float]] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    blocked_events: int = 0

    def peak(self) -> int:
        """The most LLM steps that ran at one moment; an end at the same instant as a start frees the slot first."""
        points = sorted([(start, 1) for start, _ in self.intervals] + [(end, -1) for _, end in self.intervals])
        running = peak = 0
        for _, delta in points:
            running += delta
            peak = max(peak, running)
        return peak


def pool_use(instance: dg.DagsterInstance, run_ids: Iterable[str]) -> PoolUse:
    use = PoolUse()
    for run_id in run_ids:
        starts: dict[str, float] = {}
        for entry in instance.all_logs(run_id):
            event = entry.dagster_event
            if event is None:
                continue
            if event.event_type == DagsterEventType.ENGINE_EVENT and POOL in (entry.message or ""):
                use.blocked_events += 1
            if not is_llm_step(event.step_key):
                continue
            if event.event_type == DagsterEventType.STEP_START:
                starts[event.step_key] = entry.timestamp
            elif event.event_type in (DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE):
                use.intervals.append((starts.pop(event.step_key), entry.timestamp))
        use.unfinished.extend(f"{run_id}:{step}" for step in starts)
    return use
