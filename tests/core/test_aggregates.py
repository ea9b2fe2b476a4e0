"""Daily BI aggregates: exact counts, percentiles, error handling and the threshold share."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

from faithfulness_pipeline.core.aggregates import AGGREGATE_SCHEMA, daily_aggregates

D1 = dt.date(2026, 11, 24)
D2 = dt.date(2026, 11, 25)


def scored(rows: list[dict[str, object]]) -> pl.DataFrame:
    base = {
        "day": D1,
        "model": "m",
        "status": "ok",
        "hallucination_score": 0.0,
        "faithfulness_score": 1.0,
        "n_claims": 1,
        "n_supported": 1,
        "n_contradicted": 0,
        "n_unsupported": 0,
        "n_speculative": 0,
        "llm_calls": 0.5,
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "cost_usd": 0.01,
    }
    return pl.DataFrame([{**base, **r} for r in rows], schema_overrides={"cost_usd": pl.Float64})


def test_one_group_exact_statistics() -> None:
    halluc = [0.0, 0.25, 0.5, 0.75, 1.0]
    table = daily_aggregates(
        scored(
            [
                {
                    "hallucination_score": h,
                    "faithfulness_score": 1 - h,
                    "n_claims": 4,
                    "n_contradicted": int(h * 4),
                    "n_supported": 4 - int(h * 4),
                }
                for h in halluc
            ]
        ),
        hallucination_threshold=0.5,
    )
    assert table.height == 1
    row = table.row(0, named=True)
    assert row["answers"] == 5 and row["scored_answers"] == 5 and row["error_answers"] == 0
    assert row["hallucination_mean"] == pytest.approx(0.5)
    assert row["hallucination_p50"] == pytest.approx(0.5)
    # linear interpolation, like SQL quantile_cont: 0.9 * 4 = 3.6 -> 0.75 + 0.6 * 0.25
    assert row["hallucination_p90"] == pytest.approx(0.9)
    assert row["faithfulness_p90"] == pytest.approx(0.9)
    # strictly greater than the threshold: 0.75 and 1.0
    assert row["over_threshold_answers"] == 2
    assert row["over_threshold_share"] == pytest.approx(0.4)
    assert row["claims"] == 20 and row["contradicted_claims"] == 10
    assert row["prompt_tokens"] == 50 and row["completion_tokens"] == 10 and row["total_tokens"] == 60
    assert row["llm_calls"] == pytest.approx(2.5)
    assert row["cost_usd"] == pytest.approx(0.05) and row["cost_unknown_answers"] == 0


def test_errors_are_counted_never_averaged_as_zero() -> None:
    table = daily_aggregates(
        scored(
            [
                {"hallucination_score": 1.0, "faithfulness_score": 0.0},
                {
                    "status": "error",
                    "hallucination_score": None,
                    "faithfulness_score": None,
                    "n_claims": 0,
                    "n_supported": 0,
                    "cost_usd": None,
                },
            ]
        )
    )
    row = table.row(0, named=True)
    assert row["answers"] == 2 and row["scored_answers"] == 1 and row["error_answers"] == 1
    assert row["error_rate"] == pytest.approx(0.5)
    assert row["hallucination_mean"] == pytest.approx(1.0)
    assert row["over_threshold_share"] == pytest.approx(1.0)
    assert row["cost_usd"] == pytest.approx(0.01) and row["cost_unknown_answers"] == 1


def test_groups_per_day_and_model_sorted() -> None:
    table = daily_aggregates(
        scored(
            [
                {"day": D2, "model": "b"},
                {"day": D1, "model": "b"},
                {"day": D1, "model": "a"},
                {"day": D2, "model": None},
            ]
        )
    )
    assert table.select("day", "model").rows() == [(D1, "a"), (D1, "b"), (D2, "b"), (D2, None)]
    assert table.get_column("answers").to_list() == [1, 1, 1, 1]


def test_zero_claim_answers_and_null_scores() -> None:
    table = daily_aggregates(
        scored(
            [
                {"n_claims": 0, "n_supported": 0, "hallucination_score": None, "faithfulness_score": None},
                {"hallucination_score": 0.0},
            ]
        )
    )
    row = table.row(0, named=True)
    assert row["zero_claim_answers"] == 1
    assert row["hallucination_mean"] == pytest.approx(0.0)
    assert row["over_threshold_share"] == pytest.approx(0.0)


def test_missing_model_column_and_datetime_day() -> None:
    frame = (
        scored([{"hallucination_score": 0.5}])
        .drop("model")
        .with_columns(pl.lit(dt.datetime(2026, 11, 24, 23, 59)).alias("day"))
    )
    table = daily_aggregates(frame)
    assert table.select("day", "model").rows() == [(D1, None)]


def test_empty_input_keeps_the_schema() -> None:
    table = daily_aggregates(scored([{}]).clear())
    assert table.is_empty()
    assert dict(table.schema) == AGGREGATE_SCHEMA


def test_missing_day_column_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="day column"):
        daily_aggregates(scored([{}]).drop("day"))


def test_cjk_model_names_group_fine() -> None:
    table = daily_aggregates(scored([{"model": "模型-한국어"}, {"model": "模型-한국어"}]))
    assert table.select("model", "answers").rows() == [("模型-한국어", 2)]


def test_billed_spend_and_where_answers_came_from() -> None:
    table = daily_aggregates(scored([
        {"result_source": "llm", "billed_llm_calls": 0.5, "billed_prompt_tokens": 10, "billed_completion_tokens": 2,
         "billed_cost_usd": 0.01},
        {"result_source": "duplicate", "billed_llm_calls": 0.0, "billed_prompt_tokens": 0,
         "billed_completion_tokens": 0, "billed_cost_usd": 0.0},
        {"result_source": "store", "billed_llm_calls": 0.0, "billed_prompt_tokens": 0, "billed_completion_tokens": 0,
         "billed_cost_usd": 0.0},
        {"result_source": "store", "billed_llm_calls": 0.0, "billed_prompt_tokens": 0, "billed_completion_tokens": 0,
         "billed_cost_usd": 0.0},
    ]))
    row = table.row(0, named=True)
    # what producing the four results cost, and what scoring the day was billed
    assert row["cost_usd"] == pytest.approx(0.04) and row["billed_cost_usd"] == pytest.approx(0.01)
    assert (row["billed_prompt_tokens"], row["store_answers"], row["duplicate_answers"]) == (10, 2, 1)
    assert (row["store_share"], row["duplicate_share"]) == (0.5, 0.25)


def test_an_unknown_bill_is_null_not_zero() -> None:
    priced = {"result_source": "llm", "billed_llm_calls": 1.0, "billed_prompt_tokens": 5,
              "billed_completion_tokens": 1, "billed_cost_usd": None}
    row = daily_aggregates(scored([priced])).row(0, named=True)
    assert row["billed_cost_usd"] is None and row["billed_prompt_tokens"] == 5
    before_billing = daily_aggregates(scored([{}])).row(0, named=True)  # a table scored before these columns
    assert before_billing["billed_cost_usd"] is None and before_billing["store_share"] == 0.0


def test_percentiles_are_rounded_like_the_scores() -> None:
    # interpolated between 0.67 and 1.0, p90 is 0.9339999999999999 in floats; the table shows 0.93
    table = daily_aggregates(scored([{"hallucination_score": h, "faithfulness_score": h} for h in (0.33, 0.67, 1.0)]))
    row = table.row(0, named=True)
    assert row["hallucination_p90"] == 0.93 and row["faithfulness_p90"] == 0.93
    assert row["hallucination_p50"] == 0.67
    assert pl.Series([0.33, 0.67, 1.0]).quantile(0.9, "linear") != 0.93  # the noise the rounding removes


def _random_day(rng_seed: int, rows: int) -> pl.DataFrame:
    import random

    rng = random.Random(rng_seed)
    records = []
    for _ in range(rows):
        status = rng.choices(["ok", "error", "not_sampled", "skipped"], [8, 1, 2, 1])[0]
        h = round(rng.random(), 2) if status == "ok" and rng.random() > 0.05 else None
        claims = rng.randint(0, 6)
        records.append({
            "day": rng.choice([D1, D2]), "model": rng.choice(["a", "b", None]), "status": status,
            "hallucination_score": h, "faithfulness_score": None if h is None else round(1 - h * rng.random(), 2),
            "n_claims": claims, "n_supported": claims // 2, "n_contradicted": claims // 3, "n_unsupported": 0,
            "n_speculative": claims % 2, "llm_calls": 0.5, "prompt_tokens": rng.randint(5, 50),
            "completion_tokens": 3, "cost_usd": rng.choice([0.01, None]),
            "billed_cost_usd": rng.choice([0.0, 0.01, 0.01, None]), "result_source": rng.choice(["llm", "store"]),
        })
    return pl.DataFrame(records, schema_overrides={"cost_usd": pl.Float64, "billed_cost_usd": pl.Float64})


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_parts_of_chunks_merge_into_the_aggregates_of_the_whole(seed: int) -> None:
    """A reader of many chunks (the report over a month) merges each chunk's parts: every count, sum, mean,
    interval and percentile equals what the whole table gives at once."""
    from faithfulness_pipeline.core.aggregates import daily_parts, finish_daily, merge_parts

    whole = _random_day(seed, 700)
    chunks = [whole.slice(start, 97) for start in range(0, whole.height, 97)]
    merged = finish_daily(merge_parts(daily_parts(c, hallucination_threshold=0.4) for c in chunks),
                          hallucination_threshold=0.4)
    at_once = daily_aggregates(whole, hallucination_threshold=0.4)
    assert merged.height == at_once.height == 6  # two days x (a, b, no model)
    floats = [n for n, d in AGGREGATE_SCHEMA.items() if d == pl.Float64()]
    assert merged.drop(floats).equals(at_once.drop(floats))
    for name in floats:
        assert merged.get_column(name).to_list() == pytest.approx(at_once.get_column(name).to_list(), abs=1e-12), name


def test_percentiles_from_counts_equal_polars_quantiles_on_any_values() -> None:
    """Scores that are not two-decimal (a table from elsewhere) still give polars' own linear quantiles."""
    from faithfulness_pipeline.core.aggregates import percentiles, score_counts

    whole = _random_day(7, 400).with_columns(pl.col("hallucination_score") / 3)
    keyed = whole.with_columns(pl.col("day").alias("__day"), pl.col("model").alias("__model"))
    got = percentiles(score_counts(keyed, ("__day", "__model")), ("__day", "__model"))
    ok = keyed.filter(pl.col("status") == "ok")
    want = ok.group_by("__day", "__model").agg(
        pl.col("hallucination_score").quantile(0.5, "linear").alias("p50"),
        pl.col("hallucination_score").quantile(0.9, "linear").alias("p90"))
    joined = want.join(got, on=["__day", "__model"], nulls_equal=True)
    assert joined.height == 6
    assert joined.get_column("p50").to_list() == pytest.approx(joined.get_column("hallucination_p50").to_list())
    assert joined.get_column("p90").to_list() == pytest.approx(joined.get_column("hallucination_p90").to_list())
