"""Deterministic samples (``sample_rate``): the same rows on every run whatever the order or chunking,
nested when the rate grows, unsampled rows never judged and never dropped, and 95 % intervals on the
daily aggregates that cover the population's value as often as they say (issue 29, items 1-2)."""

from __future__ import annotations

import asyncio
import datetime as dt
import random

import polars as pl
import pytest

from faithfulness_pipeline import score_frame
from faithfulness_pipeline.core.aggregates import daily_aggregates
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.pipeline import score_chunks
from faithfulness_pipeline.core.sampling import in_sample, plan_sample
from faithfulness_pipeline.testing.marker_judge import MarkerJudge

ANSWERS = ["Paris is the capital of France. It has 40 million people.", "长城位于中国。长城建于1990年。",
           "서울은 한국의 수도이다. 서울은 바다 위에 있다.", "Paris is the capital of France.", "长城位于中国。",
           "서울은 한국의 수도이다."]
CONTEXT = [["Paris is the capital of France."], ["长城位于中国。"], ["서울은 한국의 수도이다."]]


def frame(n: int) -> pl.DataFrame:
    """``n`` distinct answers (no two alike, so no row's result is a copy of another's) of two models."""
    return pl.DataFrame({
        "conversation_id": [f"conv-{i}" for i in range(n)],
        "output": [f"{ANSWERS[i % 6]} ({i})" for i in range(n)],
        "context": [CONTEXT[i % 3] for i in range(n)],
        "model": ["model-a" if i % 2 else "model-b" for i in range(n)],
    })


def sampled_keys(scored: pl.DataFrame) -> set[str]:
    return set(scored.filter(pl.col("status") != "not_sampled").get_column("row_key").to_list())


def test_the_sample_depends_on_the_row_keys_alone_and_grows_by_adding_rows() -> None:
    keys = pl.Series([f"row-{i}" for i in range(20_000)])
    shuffled = keys.sample(fraction=1.0, shuffle=True, seed=3)
    low, high = set(keys.filter(in_sample(keys, 0.1))), set(keys.filter(in_sample(keys, 0.3)))
    assert set(shuffled.filter(in_sample(shuffled, 0.1))) == low  # order (and so chunking) plays no part
    assert low < high  # nested: a higher rate keeps every row and adds others
    # each share within four standard deviations of its rate
    for rate, chosen in ((0.1, low), (0.3, high)):
        assert abs(len(chosen) / keys.len() - rate) < 4 * (rate * (1 - rate) / keys.len()) ** 0.5, (rate, len(chosen))
    assert in_sample(keys.head(5), 1.0).all()


def test_rows_outside_the_sample_are_never_judged_and_never_dropped() -> None:
    rows = frame(300)
    judge = MarkerJudge()
    scored = score_frame(rows, judge=judge, config=ScoringConfig(sample_rate=0.25, chunk_rows=70))
    assert scored.height == rows.height and scored.get_column("conversation_id").equals(rows.get_column("conversation_id"))
    chosen = sampled_keys(scored)
    assert 0 < len(chosen) < rows.height
    assert {item.id for item in judge.extract_calls} == chosen  # the judge saw the sample and nothing else
    outside = scored.filter(pl.col("status") == "not_sampled")
    assert outside.height == rows.height - len(chosen)
    assert outside.select("hallucination_score", "faithfulness_score", "n_claims", "hallucination_reason",
                          "claims", "verdicts", "error").null_count().row(0) == (outside.height,) * 7
    assert set(outside.get_column("result_source")) == {"not_sampled"}
    assert outside.get_column("billed_llm_calls").sum() == 0 and outside.get_column("prompt_tokens").sum() == 0
    # The sampled rows score exactly as in a full run; in-chunk order and chunk size change nothing.
    full = score_frame(rows, judge=MarkerJudge(), config=ScoringConfig(chunk_rows=1000))
    keep = [c for c in scored.columns if c not in ("scored_at", "scoring_run_id")]
    inside = scored.filter(pl.col("status") != "not_sampled").select(keep)
    assert inside.equals(full.filter(pl.col("row_key").is_in(list(chosen))).select(keep))
    again = score_frame(rows.reverse(), judge=MarkerJudge(), config=ScoringConfig(sample_rate=0.25, chunk_rows=1000))
    assert sampled_keys(again) == chosen


def test_the_daily_aggregates_count_what_landed_and_what_was_judged() -> None:
    rows = frame(400)
    scored = score_frame(rows, config=ScoringConfig(sample_rate=0.5)).with_columns(pl.lit(dt.date(2026, 12, 1)).alias("day"))
    daily = daily_aggregates(scored)
    assert daily.get_column("model").to_list() == ["model-a", "model-b"]
    for row in daily.iter_rows(named=True):
        assert row["answers"] == 200
        judged = scored.filter((pl.col("model") == row["model"]) & (pl.col("status") != "not_sampled")).height
        assert row["sampled_answers"] == judged and row["sample_share"] == pytest.approx(judged / 200)
        assert row["error_answers"] == 0 and row["error_rate"] == 0  # not_sampled rows are not errors
        assert row["hallucination_mean_low"] <= row["hallucination_mean"] <= row["hallucination_mean_high"]
        assert row["hallucination_mean_low"] < row["hallucination_mean_high"]  # a sample: a real interval
    census = daily_aggregates(score_frame(rows).with_columns(pl.lit(dt.date(2026, 12, 1)).alias("day")))
    for row in census.iter_rows(named=True):  # a census: the population's own values, zero-width
        assert row["sampled_answers"] == row["answers"] == 200 and row["sample_share"] == 1
        assert row["hallucination_mean_low"] == row["hallucination_mean"] == row["hallucination_mean_high"]
        assert row["faithfulness_mean_low"] == row["faithfulness_mean"] == row["faithfulness_mean_high"]
        assert row["over_threshold_share_low"] == row["over_threshold_share"] == row["over_threshold_share_high"]


def test_a_cap_per_model_keeps_the_smallest_draws_and_nests() -> None:
    sizes = {"big": 3000, "mid": 120, "small": 30}
    rows = pl.DataFrame({
        "row_key": [f"{model}-{i}" for model, n in sizes.items() for i in range(n)],
        "model": [model for model, n in sizes.items() for _ in range(n)],
    })
    chunks = [rows.slice(offset, 700) for offset in range(0, rows.height, 700)]  # the plan reads it in pieces
    capped = plan_sample(chunks, 0.5, 40, "model")
    chosen = rows.filter(capped.selects(rows))
    counts = dict(chosen.group_by("model").len().iter_rows())
    below = dict(rows.filter(in_sample(rows.get_column("row_key"), 0.5)).group_by("model").len().iter_rows())
    assert counts == {model: min(40, below[model]) for model in sizes}, (counts, below)
    assert counts["big"] == counts["mid"] == 40 and counts["small"] < 40  # a small model keeps its whole sample
    # nested: a higher cap or rate keeps every row a lower one picked, and so does no cap
    keys = set(chosen.get_column("row_key"))
    for bigger in (plan_sample(chunks, 0.5, 80, "model"), plan_sample(chunks, 0.9, 40, "model"),
                   plan_sample(chunks, 0.5, None, "model")):
        assert keys <= set(rows.filter(bigger.selects(rows)).get_column("row_key"))
    # the order rows are read in changes nothing
    assert plan_sample([rows.reverse()], 0.5, 40, "model") == capped


def test_score_frame_caps_each_model_and_score_chunks_refuses_a_cap_it_cannot_plan() -> None:
    rows = frame(300)
    scored = score_frame(rows, judge=MarkerJudge(), config=ScoringConfig(sample_rate=0.5, sample_max_rows=25,
                                                                         chunk_rows=64))
    judged = scored.filter(pl.col("status") != "not_sampled")
    assert dict(judged.group_by("model").len().iter_rows()) == {"model-a": 25, "model-b": 25}
    assert scored.height == rows.height

    async def stream() -> None:
        async for _ in score_chunks(iter([rows]), MarkerJudge(), ScoringConfig(sample_max_rows=5)):
            pass

    with pytest.raises(ConfigError, match="sample_max_rows needs the run's rows"):
        asyncio.run(stream())


@pytest.mark.parametrize("rate", [0, -0.1, 1.5, float("nan")])
def test_a_rate_outside_zero_to_one_is_refused_naming_the_setting(rate: float) -> None:
    with pytest.raises(ConfigError, match="sample_rate must be a number in \\(0, 1\\]"):
        ScoringConfig(sample_rate=rate)


def _population(n: int) -> list[float]:
    """Hallucination scores shaped like a real day's: most answers clean, some wholly wrong, some partly."""
    rng = random.Random(20261202)
    partial = [0.25, 0.33, 0.5, 0.67, 0.75]
    return [0.0 if (u := rng.random()) < 0.6 else 1.0 if u < 0.75 else rng.choice(partial) for _ in range(n)]


def test_the_95_percent_intervals_cover_the_population_value_95_times_in_100() -> None:
    """200 samples (10 %) of one known population of 2,000 answers, each drawn by new row keys: the true mean
    (normal interval with the finite-population correction) and the true share over the threshold
    (Wilson) lie inside their intervals in 93-97 % of the samples."""
    scores = _population(2000)
    true_mean = sum(scores) / len(scores)
    true_share = sum(s > 0.5 for s in scores) / len(scores)
    mean_hits = share_hits = 0
    for seed in range(200):
        keys = pl.Series([f"sample-{seed}-row-{i}" for i in range(len(scores))])
        chosen = in_sample(keys, 0.1)
        table = pl.DataFrame({
            "day": [dt.date(2026, 12, 1)] * len(scores), "model": ["m"] * len(scores),
            "status": pl.Series(["ok"] * len(scores)).zip_with(chosen, pl.Series(["not_sampled"] * len(scores))),
            "hallucination_score": pl.Series(scores).zip_with(chosen, pl.Series([None] * len(scores), dtype=pl.Float64)),
        }).with_columns(
            (1 - pl.col("hallucination_score")).alias("faithfulness_score"),
            *[pl.lit(0, dtype=pl.Int64).alias(c) for c in ("n_claims", "n_supported", "n_contradicted",
                                                             "n_unsupported", "n_speculative", "prompt_tokens",
                                                             "completion_tokens")],
            pl.lit(0.0).alias("llm_calls"), pl.lit(0.0).alias("cost_usd"),
        )
        row = daily_aggregates(table, hallucination_threshold=0.5).row(0, named=True)
        mean_hits += row["hallucination_mean_low"] <= true_mean <= row["hallucination_mean_high"]
        share_hits += row["over_threshold_share_low"] <= true_share <= row["over_threshold_share_high"]
    print(f"coverage of 200 samples: mean {mean_hits / 200:.3f}, share over the threshold {share_hits / 200:.3f}")
    assert 0.93 <= mean_hits / 200 <= 0.97, mean_hits
    assert 0.93 <= share_hits / 200 <= 0.97, share_hits
