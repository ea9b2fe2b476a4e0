"""The comparisons' statistics (core.compare, core.intervals) against scipy and scikit-learn, and checked by
simulation: intervals that cover the true difference about 95 % of the time, and a false "larger than noise"
about 5 % of the time when there is no difference. Seeds fixed: the same draws every run."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy import stats
from sklearn.metrics import cohen_kappa_score

from faithfulness_pipeline.core.compare import (
    LARGER,
    TOO_FEW,
    CompareConfig,
    compare,
    compare_segments,
    paired_score,
    paired_share,
    welch_score,
)
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.core.intervals import mcnemar_exact_p, t_quantile

CONFIG = CompareConfig()


@pytest.mark.parametrize("df", [1, 3, 9, 29, 120])
def test_t_quantiles_match_scipy(df: int) -> None:
    for p in (0.6, 0.975, 0.995):
        assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-7)


def test_paired_and_welch_match_scipy() -> None:
    rng = np.random.default_rng(7)
    b = rng.beta(2, 5, 60)
    c = np.clip(b + rng.normal(0.05, 0.1, 60), 0, 1)
    paired = paired_score(b, c, 1.0, CONFIG)
    oracle = stats.ttest_rel(c, b)
    low, high = oracle.confidence_interval(0.95)
    assert (paired["p_value"], paired["low"], paired["high"]) == pytest.approx((oracle.pvalue, low, high), rel=1e-6)
    other = rng.beta(2, 4, 45)
    welch = welch_score(b, other, 1.0, 1.0, CONFIG)
    oracle = stats.ttest_ind(other, b, equal_var=False)
    low, high = oracle.confidence_interval(0.95)
    assert (welch["p_value"], welch["low"], welch["high"]) == pytest.approx((oracle.pvalue, low, high), rel=1e-6)


def test_mcnemar_and_kappa_match_scipy_and_sklearn() -> None:
    assert mcnemar_exact_p(3, 11) == pytest.approx(stats.binomtest(3, 14, 0.5).pvalue)
    rng = np.random.default_rng(3)
    b = rng.uniform(0, 1, 80)
    c = np.where(rng.uniform(0, 1, 80) < 0.8, b, rng.uniform(0, 1, 80))
    share = paired_share(b, c, CONFIG)
    assert share["kappa"] == pytest.approx(cohen_kappa_score(b > 0.5, c > 0.5))
    assert share["correlation"] == pytest.approx(stats.pearsonr(b, c).statistic)
    assert share["share_p_value"] == pytest.approx(
        stats.binomtest(min(share["flipped_to_over"], share["flipped_to_under"]),
                        share["flipped_to_over"] + share["flipped_to_under"], 0.5).pvalue)


def _draws(paired: bool, shift: float, runs: int = 400, n: int = 40) -> tuple[float, float]:
    """(share of intervals covering ``shift``, share called larger than noise) over ``runs`` samples."""
    rng = np.random.default_rng(20261205 + int(paired) + int(shift * 100))
    covered = larger = 0
    for _ in range(runs):
        base = rng.beta(2, 3, n)
        if paired:
            cand = base + shift + rng.normal(0, 0.15, n)
            row = paired_score(base, cand, 1.0, CONFIG)
        else:
            cand = rng.beta(2, 3, n + 7) + shift
            row = welch_score(base, cand, 1.0, 1.0, CONFIG)
        covered += row["low"] <= shift <= row["high"]
        larger += row["low"] > 0 or row["high"] < 0
    return covered / runs, larger / runs


@pytest.mark.parametrize("paired", [True, False], ids=["paired", "welch"])
def test_intervals_cover_about_95_percent_and_say_different_about_5_percent_by_chance(paired: bool) -> None:
    coverage, false_different = _draws(paired, 0.0)
    assert 0.92 <= coverage <= 0.98 and 0.02 <= false_different <= 0.08
    coverage, found = _draws(paired, 0.1)
    assert 0.92 <= coverage <= 0.98
    assert found > 0.5  # a real difference of 0.1 is found more often than not at n=40


def _scored(keys: list[str], hallucination: list[float], **extra: list[object]) -> pl.DataFrame:
    return pl.DataFrame({"row_key": keys, "hallucination_score": hallucination,
                         "faithfulness_score": [1 - h for h in hallucination], "status": ["ok"] * len(keys),
                         **extra})


def test_a_sample_table_narrows_its_interval_by_the_finite_population_correction() -> None:
    rng = np.random.default_rng(11)
    keys = [f"k{i}" for i in range(40)]
    b = list(rng.uniform(0, 1, 40))
    c = [min(1.0, max(0.0, x + float(d))) for x, d in zip(b, rng.normal(0.1, 0.1, 40), strict=True)]
    whole = compare(_scored(keys, b), _scored(keys, c)).table.row(0, named=True)
    extra = [f"x{i}" for i in range(40)]
    sampled = compare(
        pl.concat([_scored(keys, b), _scored(extra, [0.0] * 40).with_columns(pl.lit("not_sampled").alias("status"))]),
        pl.concat([_scored(keys, c), _scored(extra, [0.0] * 40).with_columns(pl.lit("not_sampled").alias("status"))]),
    ).table.row(0, named=True)
    factor = np.sqrt((80 - 40) / (80 - 1))
    assert (sampled["high"] - sampled["low"]) == pytest.approx((whole["high"] - whole["low"]) * factor)


def test_rows_that_failed_to_score_were_still_drawn_so_they_narrow_nothing() -> None:
    """The correction counts the rows outside the sample (not_sampled), never rows the judge failed on: a
    census with errors is a census, and a sample's correction is the same with or without them."""
    rng = np.random.default_rng(5)
    keys = [f"k{i}" for i in range(40)]
    b = list(rng.uniform(0, 1, 40))
    c = [min(1.0, max(0.0, x + float(d))) for x, d in zip(b, rng.normal(0.1, 0.1, 40), strict=True)]
    failing = ["error"] * 4 + ["ok"] * 36
    census = compare(_scored(keys, b), _scored(keys, c).with_columns(pl.Series("status", failing))).table.row(
        0, named=True)
    ok = [k for k, status in zip(keys, failing, strict=True) if status == "ok"]
    plain = compare(_scored(ok, b[4:]), _scored(ok, c[4:])).table.row(0, named=True)
    assert (census["low"], census["high"]) == pytest.approx((plain["low"], plain["high"]))
    extra = [f"x{i}" for i in range(40)]
    unsampled = _scored(extra, [0.0] * 40).with_columns(pl.lit("not_sampled").alias("status"))
    sampled = compare(pl.concat([_scored(keys, b), unsampled]),
                      pl.concat([_scored(keys, c).with_columns(pl.Series("status", failing)), unsampled]))
    row = sampled.table.row(0, named=True)
    factor = np.sqrt((80 - 40) / (80 - 1))
    assert (row["high"] - row["low"]) == pytest.approx((plain["high"] - plain["low"]) * factor)


def test_small_groups_say_too_few_rows_and_bad_pairs_are_refused() -> None:
    keys = [f"k{i}" for i in range(30)]
    b = _scored(keys, [0.2] * 25 + [0.9] * 5, language=["en"] * 27 + ["ko"] * 3)
    c = _scored(keys, [0.1] * 25 + [0.1] * 5, language=["en"] * 27 + ["ko"] * 3)
    result = compare(b, c)
    ko = result.table.filter((pl.col("group") == "ko") & (pl.col("score") == "hallucination")).row(0, named=True)
    assert ko["verdict"] == TOO_FEW and ko["low"] is None
    overall = result.table.filter((pl.col("group_by") == "all") & (pl.col("score") == "hallucination")).row(0, named=True)
    assert overall["verdict"] == LARGER and result.flips.height == 5
    with pytest.raises(InputError, match="no column 'question' to pair on"):
        compare(b, c, pair_on="question")
    with pytest.raises(InputError, match="different scales"):
        compare(b.with_columns(pl.col("hallucination_score") * 10), c)
    with pytest.raises(InputError, match="no hallucination_score"):
        compare(b.drop("hallucination_score"), c)
    other = _scored([f"z{i}" for i in range(30)], [0.1] * 30)
    assert not compare(b, other).paired  # nothing pairs: Welch
    with pytest.raises(InputError, match="share no value"):
        compare(b, other, pair_on="row_key")


@pytest.mark.parametrize("discordant", [(700, 800), (1400, 1600), (3, 2997), (45_000, 55_000), (5000, 5000)])
def test_mcnemar_holds_to_scipy_past_a_floats_range(discordant: tuple[int, int]) -> None:
    # 2**n leaves a float's range from n = 1,024 discordant pairs on: a month's comparison has far more
    b, c = discordant
    assert mcnemar_exact_p(b, c) == pytest.approx(stats.binomtest(min(b, c), b + c, 0.5).pvalue, rel=1e-9, abs=1e-300)


def test_three_thousand_rows_that_half_flip_compare_with_a_p_value() -> None:
    keys = [f"k{i}" for i in range(3000)]
    result = compare(_scored(keys, [0.9] * 1500 + [0.1] * 1500), _scored(keys, [0.1] * 1500 + [0.9] * 1500))
    row = result.table.filter(pl.col("group_by") == "all").row(0, named=True)
    assert row["share_p_value"] == 1.0 and result.flips.height == 3000


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_score_that_is_not_a_finite_number_is_refused_by_table_column_and_row(bad: float) -> None:
    keys = [f"k{i}" for i in range(30)]
    good = _scored(keys, [0.2] * 30)
    broken = _scored(keys, [0.2] * 29 + [bad])
    with pytest.raises(InputError, match=r"the candidate table's hallucination_score holds 1 value\(s\) that are not "
                                         r"finite numbers .*'k29'"):
        compare(good, broken)
    with pytest.raises(InputError, match="the baseline table's faithfulness_score holds 1"):
        compare(good.with_columns(pl.Series("faithfulness_score", [bad] + [0.5] * 29)), good)


def test_pairing_on_ids_read_as_text_in_one_table_and_integers_in_the_other_pairs_them() -> None:
    keys = [f"k{i}" for i in range(30)]
    b = _scored(keys, [0.2] * 30).with_columns(pl.Series("question_id", [str(i) for i in range(30)]))
    c = _scored([f"z{i}" for i in range(30)], [0.3] * 30).with_columns(pl.Series("question_id", list(range(30))))
    result = compare(b, c, pair_on="question_id")
    assert result.paired and result.pairs == 30
    assert result.table.filter(pl.col("group_by") == "all").row(0, named=True)["difference"] == pytest.approx(0.1)


def test_lists_are_refused_as_groups_to_compare_or_keys_to_pair_on() -> None:
    keys = [f"k{i}" for i in range(30)]
    tagged = _scored(keys, [0.2] * 30).with_columns(pl.Series("tags", [["a", str(i % 2)] for i in range(30)]))
    with pytest.raises(InputError, match=r"--by 'tags' is a column of List\(String\)"):
        compare_segments(tagged, "tags")
    with pytest.raises(InputError, match=r"--pair-on 'tags' is a column of List\(String\)"):
        compare(tagged, tagged, pair_on="tags")
