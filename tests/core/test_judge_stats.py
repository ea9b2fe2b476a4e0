"""JudgeStats add up: the layers around a judge, the batch judge and the Dagster shards total them with ``+``."""

from __future__ import annotations

from faithfulness_pipeline.core.port import JudgeStats


def test_stats_add_field_by_field_with_each_note_once() -> None:
    a = JudgeStats(requests=2, prompt_tokens=10, completion_tokens=3, cost_usd=0.25, cached_prompt_tokens=4,
                   cached_items=1, duplicate_items=2, failed_items=1, retries=3, notes=["x", "y"])
    b = JudgeStats(requests=1, prompt_tokens=5, completion_tokens=1, cost_usd=0.5, cached_prompt_tokens=1,
                   cached_items=0, duplicate_items=1, failed_items=0, retries=1, notes=["y", "z"])
    assert a + b == JudgeStats(requests=3, prompt_tokens=15, completion_tokens=4, cost_usd=0.75,
                               cached_prompt_tokens=5, cached_items=1, duplicate_items=3, failed_items=1, retries=4,
                               notes=["x", "y", "z"])


def test_an_unknown_cost_stays_unknown() -> None:
    assert (JudgeStats(cost_usd=None) + JudgeStats(cost_usd=1.0)).cost_usd is None
    assert (JudgeStats(cost_usd=1.0) + JudgeStats(cost_usd=None)).cost_usd is None


def test_sum_starts_from_nothing() -> None:
    stats = [JudgeStats(requests=1, cost_usd=0.1, notes=["a"]), JudgeStats(requests=2, cost_usd=0.2, notes=["a"])]
    assert sum(stats) == sum(stats, JudgeStats()) == stats[0] + stats[1]
    assert sum([], JudgeStats()) == JudgeStats()
    one = JudgeStats(requests=1, notes=["n"])
    total = sum([one])
    assert total == one and total is not one and total.notes is not one.notes
