"""The audit sample people label (issue 51, item 1): drawn from the row keys with a salt of its own, so it is
independent of the judging sample and of the judge; the same rows in any order; nested when it grows; shared
out over day x model x language with a minimum each; only scored rows drawn, the others counted; and weighted
by its inclusion probabilities, an unbiased estimate of a mean over the scored rows."""

from __future__ import annotations

import datetime as dt
import json
import random
import statistics

import polars as pl
import pytest

from faithfulness_pipeline.core.allocation import allocate
from faithfulness_pipeline.core.audit import (
    AUDIT_POINT,
    INCLUSION_PROBABILITY,
    STRATUM,
    STRATUM_ROWS,
    STRATUM_SAMPLE,
    audit_plan,
    audit_points,
    draw_audit,
)
from faithfulness_pipeline.core.errors import ConfigError, InputError
from faithfulness_pipeline.core.sampling import sample_points

DAYS = [dt.date(2026, 11, 24), dt.date(2026, 11, 25)]
MODELS = ["model-a", "model-b", None]
LANGUAGES = ["en", "zh", "ko", "en", "en"]


def table(n: int, seed: int = 7) -> pl.DataFrame:
    """``n`` scored rows over two days, three models (one null) and three languages (en more often); one row
    in 10 an error, one in 20 outside the judging sample, one in 50 skipped."""
    draw = random.Random(seed)
    statuses = ["error"] * 10 + ["not_sampled"] * 5 + ["skipped"] * 2 + ["ok"] * 83
    return pl.DataFrame({
        "row_key": [f"conv-{i:06d}" for i in range(n)],
        "status": [draw.choice(statuses) for _ in range(n)],
        "day": [draw.choice(DAYS) for _ in range(n)],
        "model": [draw.choice(MODELS) for _ in range(n)],
        "language": [draw.choice(LANGUAGES) for _ in range(n)],
    })


def test_audit_points_are_independent_of_the_judging_samples_points() -> None:
    keys = pl.Series([f"row-{i}" for i in range(10_000)])
    audit, judging = audit_points(keys), sample_points(keys)
    assert not audit.equals(judging)
    correlation = pl.DataFrame({"a": audit, "j": judging}).select(pl.corr("a", "j")).item()
    assert abs(correlation) < 0.04  # four standard errors (1 / sqrt(10,000)) of no correlation at all
    assert abs(audit.mean() - 0.5) < 4 * (1 / 12 / 10_000) ** 0.5  # type: ignore[operator]
    assert audit.min() >= 0.0 and audit.max() < 1.0  # type: ignore[operator]
    # a point depends on the key alone: in chunks, or in another order, each key keeps its point
    chunked = pl.concat([audit_points(keys.slice(start, 999)) for start in range(0, keys.len(), 999)])
    assert chunked.equals(audit)
    assert audit_points(keys.reverse()).equals(audit.reverse())


def test_the_same_rows_give_the_same_sample_in_any_order() -> None:
    rows = table(5_000)
    drawn = draw_audit(rows, 200).rows
    shuffled = draw_audit(rows.sample(fraction=1.0, shuffle=True, seed=11), 200).rows
    assert drawn.equals(shuffled)
    assert drawn.height == 200
    # ordered by stratum, then audit point
    assert drawn.equals(drawn.sort(STRATUM, AUDIT_POINT))


def test_a_larger_sample_holds_every_row_of_a_smaller_one() -> None:
    rows = table(5_000)
    small, large = draw_audit(rows, 50).rows, draw_audit(rows, 100).rows
    assert small.height == 50 and large.height == 100
    assert set(small.get_column("row_key")) < set(large.get_column("row_key"))
    per_stratum = small.group_by(STRATUM).len().join(large.group_by(STRATUM).len(), on=STRATUM, how="left")
    assert (per_stratum.get_column("len_right") >= per_stratum.get_column("len")).all()


def test_no_stratum_loses_a_row_when_the_size_grows() -> None:
    """Nesting needs every stratum's share to grow with N, for every N: one order of rows handed out gives it."""
    draw = random.Random(51)
    for _ in range(150):
        counts = [draw.choice([0, 1, 2, 3, 5, 8, 40, 90]) for _ in range(draw.randint(1, 9))]
        before = [0] * len(counts)
        for size in range(1, sum(counts) + 2):
            shares = allocate(counts, size)
            assert sum(shares) == min(size, sum(counts)), (counts, size)
            assert all(0 <= s <= c for s, c in zip(shares, counts, strict=True)), (counts, size)
            assert all(s >= b for s, b in zip(shares, before, strict=True)), (counts, size, before, shares)
            before = list(shares)


def _largest_remainders(counts: list[int], size: int) -> list[int]:
    """Shares of ``size`` rounded each on its own (Hamilton's method): what allocate does not do."""
    quotas = [size * c / sum(counts) for c in counts]
    shares = [int(q) for q in quotas]
    for h in sorted(range(len(counts)), key=lambda h: quotas[h] - shares[h], reverse=True)[: size - sum(shares)]:
        shares[h] += 1
    return shares


def test_rounding_each_share_on_its_own_would_break_the_nesting() -> None:
    """Why the shares are handed out in one order: with largest remainders, one row more in all takes a row
    from a stratum (the Alabama paradox), and its sample would no longer hold the smaller one."""
    counts = [6, 6, 2]
    assert _largest_remainders(counts, 10) == [4, 4, 2] and _largest_remainders(counts, 11) == [5, 5, 1]
    assert allocate(counts, 10, minimum=0) == (5, 4, 1) and allocate(counts, 11, minimum=0) == (5, 5, 1)


def test_the_allocation_is_proportional_above_the_minimum() -> None:
    assert allocate([100, 300], 40) == (10, 30)
    assert allocate([600, 300, 100], 50) == (30, 15, 5)
    # small strata get the minimum (or all they have); the rest is shared in proportion to the large ones
    shares = allocate([1000, 500, 10, 3, 1], 40)
    assert sum(shares) == 40 and shares[2:] == (2, 2, 1)
    assert shares[:2] == allocate([1000, 500], 35)
    # every eligible row when the size is larger than all of them
    assert allocate([3, 0, 4], 100) == (3, 0, 4)


def test_a_size_below_the_minimum_of_every_stratum_serves_the_larger_strata_first() -> None:
    assert allocate([5, 5, 5], 4) == (2, 1, 1)  # every stratum one row, then a second one to the first of equals
    assert allocate([10, 40, 30, 20, 50], 3) == (0, 1, 1, 0, 1)  # fewer rows than strata: the three largest
    assert allocate([1, 1, 9], 2) == (1, 0, 1)
    with pytest.raises(ConfigError, match="at least 1 row"):
        allocate([5], 0)


def test_each_stratum_draws_its_share_with_the_probability_recorded() -> None:
    rows = table(3_000)
    sample = draw_audit(rows, 120)
    eligible = rows.filter(pl.col("status") == "ok").group_by("day", "model", "language").len("eligible")
    drawn = sample.rows.group_by(STRATUM, "day", "model", "language").agg(
        pl.len().alias("drawn"), pl.col(STRATUM_ROWS).first(), pl.col(STRATUM_SAMPLE).first(),
        pl.col(INCLUSION_PROBABILITY).unique())
    both = drawn.join(eligible, on=["day", "model", "language"], nulls_equal=True)
    assert both.height == drawn.height == eligible.height  # every stratum with scored rows gives rows
    assert (both.get_column(STRATUM_ROWS) == both.get_column("eligible")).all()
    assert (both.get_column("drawn") == both.get_column(STRATUM_SAMPLE)).all()
    assert (both.get_column("drawn") >= 2).all()
    for row in both.iter_rows(named=True):
        assert row[INCLUSION_PROBABILITY] == [pytest.approx(row["drawn"] / row["eligible"])]
        assert json.loads(row[STRATUM]) == [str(row["day"]), row["model"], row["language"]]
    # what the plan says, from the counts alone, is what was drawn
    plan = audit_plan(rows, 120).strata
    assert plan.select(STRATUM, STRATUM_SAMPLE).sort(STRATUM).equals(
        both.select(STRATUM, pl.col("drawn").cast(pl.Int64).alias(STRATUM_SAMPLE)).sort(STRATUM))


def test_rows_the_judge_did_not_score_are_never_drawn_and_are_counted() -> None:
    rows = table(2_000)
    sample = draw_audit(rows, 10_000)  # more than every row: everything eligible is drawn
    ok = rows.filter(pl.col("status") == "ok")
    assert set(sample.rows.get_column("row_key")) == set(ok.get_column("row_key"))
    assert (sample.rows.get_column(INCLUSION_PROBABILITY) == 1.0).all()
    counted = sample.plan.strata
    for status in ("error", "not_sampled", "skipped"):
        expected = rows.group_by("day", "model", "language").agg((pl.col("status") == status).sum().alias("n"))
        got = counted.join(expected, on=["day", "model", "language"], nulls_equal=True)
        assert got.height == counted.height
        assert (got.get_column(status) == got.get_column("n")).all(), status
        assert counted.get_column(status).sum() > 0, status
    assert counted.get_column("rows").sum() == rows.height
    # a stratum of error rows only is in the plan, with nothing to draw and no probability
    only_errors = pl.DataFrame({"row_key": ["x1", "x2"], "status": ["error", "error"], "day": [DAYS[0]] * 2,
                                "model": ["broken"] * 2, "language": ["en"] * 2})
    plan = audit_plan(pl.concat([rows, only_errors]), 100).strata.filter(pl.col("model") == "broken")
    assert plan.select("error", STRATUM_ROWS, STRATUM_SAMPLE, INCLUSION_PROBABILITY).row(0) == (2, 0, 0, None)


def test_the_weighted_mean_of_the_sample_is_unbiased() -> None:
    """Horvitz-Thompson by simulation (seed 51 for the table, 400 salts for 400 audits of 40 rows from 600
    scored rows in five strata of very different sizes and rates): the mean of the weighted estimates is
    within four standard errors of the true mean, and the unweighted one, which over-counts the small strata,
    is not."""
    draw = random.Random(51)
    sizes, rates = [400, 150, 40, 7, 3], [0.05, 0.2, 0.5, 0.9, 1.0]
    rows = pl.DataFrame({
        "row_key": [f"s{h}-{i}" for h, n in enumerate(sizes) for i in range(n)],
        "status": ["ok"] * sum(sizes),
        "day": [DAYS[0]] * sum(sizes),
        "model": [f"m{h}" for h, n in enumerate(sizes) for _ in range(n)],
        "hallucinated": [float(draw.random() < rates[h]) for h, n in enumerate(sizes) for _ in range(n)],
    })
    truth = rows.get_column("hallucinated").mean()
    weighted, plain = [], []
    for salt in range(400):
        sample = draw_audit(rows, 40, salt=f"test-salt-{salt}".encode()).rows
        y, p = sample.get_column("hallucinated"), sample.get_column(INCLUSION_PROBABILITY)
        weighted.append(float((y / p).sum()) / rows.height)
        plain.append(float(y.mean()))  # type: ignore[arg-type]
    error = statistics.stdev(weighted) / len(weighted) ** 0.5
    assert abs(statistics.mean(weighted) - truth) < 4 * error, (statistics.mean(weighted), truth, error)  # type: ignore[operator]
    assert abs(statistics.mean(plain) - truth) > 10 * error  # type: ignore[operator]


def test_each_answer_of_a_trace_is_drawn_on_its_own() -> None:
    """Rows made of spans: the point comes from the row key, not the trace id the judging sample keeps traces
    whole by, so five answers of one trace are each drawn as often as an answer alone (1 in 10 here)."""
    keys = [f"trace-big/span-{i}" for i in range(5)] + [f"trace-{i}/span-0" for i in range(5)]
    rows = pl.DataFrame({"row_key": keys, "status": ["ok"] * 10, "day": [DAYS[0]] * 10,
                         "trace_id": [k.split("/")[0] for k in keys]})
    salts = 1_000
    counts = dict.fromkeys(keys, 0)
    for salt in range(salts):
        for key in draw_audit(rows, 1, salt=f"trace-salt-{salt}".encode()).rows.get_column("row_key"):
            counts[key] += 1
    error = (0.1 * 0.9 / salts) ** 0.5
    assert all(abs(n / salts - 0.1) < 4 * error for n in counts.values()), counts


def test_strata_of_a_missing_or_null_column_and_keys_in_any_script() -> None:
    rows = pl.DataFrame({
        "row_key": ["대화-1", "대화-2", "对话-1", "对话-2", "conv-1", "conv-2", "null-1", "null-2"],
        "status": ["ok"] * 8,
        "day": [DAYS[0]] * 8,
        "model": ["모델", "모델", "模型", "模型", "null", "null", None, None],
    })
    sample = draw_audit(rows, 8)
    labels = sample.plan.strata.get_column(STRATUM).to_list()
    # no language column: one value; a null model is a stratum of its own, apart from a model named "null"
    assert len(labels) == 4 and {json.loads(label)[1] for label in labels} == {"모델", "模型", "null", None}
    assert '["2026-11-24", "모델", null]' in labels and '["2026-11-24", null, null]' in labels
    assert set(sample.rows.get_column("row_key")) == set(rows.get_column("row_key"))
    points = audit_points(rows.get_column("row_key"))
    assert points.n_unique() == 8 and ((points >= 0) & (points < 1)).all()
    assert points.equals(audit_points(rows.get_column("row_key")))


def test_what_cannot_be_drawn_from_is_refused_in_one_line() -> None:
    with pytest.raises(InputError, match="no column status"):
        draw_audit(pl.DataFrame({"row_key": ["a"]}), 1)
    with pytest.raises(InputError, match=r"1 row key\(s\) appear more than once \('a'\)"):
        draw_audit(pl.DataFrame({"row_key": ["a", "a", "b"], "status": ["ok"] * 3}), 1)
    with pytest.raises(ConfigError):
        draw_audit(table(10), 0)
    empty = draw_audit(table(10).clear(), 5)
    assert empty.rows.height == 0 and empty.plan.strata.height == 0 and empty.plan.eligible == 0
