"""Calibration statistics: the numbers equal scikit-learn's and hand counts, the bootstrap is seeded, labels
are tied to scored rows by key without dropping any, and bad labelled tables get one clear error."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy.stats import rankdata
from sklearn.metrics import (
    balanced_accuracy_score,
    cohen_kappa_score,
    f1_score,
    precision_score,
    recall_score,
    roc_auc_score,
)

from faithfulness_pipeline.core.calibration import (
    CalibrationConfig,
    _average_ranks,
    _batch,
    below_floor,
    best_threshold,
    calibrate,
    calibration_markdown,
    disagreements,
    paired_differences,
)
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.core.labels import attach_labels, check_labels, key_columns


def _scored(keys: list[str], halluc: list[float | None], model: str = "judge-a", **extra: list[object]) -> pl.DataFrame:
    status = ["ok" if h is not None else "error" for h in halluc]
    return pl.DataFrame({
        "conversation_id": keys,
        "hallucination_score": halluc,
        "faithfulness_score": [None if h is None else 1 - h for h in halluc],
        "status": status,
        "judge_model": [model] * len(keys),
        "prompt_version": ["p1"] * len(keys),
        **extra,
    }, schema_overrides={"hallucination_score": pl.Float64, "faithfulness_score": pl.Float64})


def test_the_vectorised_bootstrap_statistics_equal_scikit_learn_on_every_resample() -> None:
    rng = np.random.default_rng(7)
    y = rng.random((40, 60)) < 0.4
    score = np.round(rng.random((40, 60)), 1)  # ties on purpose: AUC must average tied ranks
    pred = score > 0.5
    got = _batch(y, pred, score)
    for i in range(40):
        assert got["balanced_accuracy"][i] == pytest.approx(balanced_accuracy_score(y[i], pred[i]))
        assert got["kappa"][i] == pytest.approx(cohen_kappa_score(y[i], pred[i]))
        assert got["f1"][i] == pytest.approx(f1_score(y[i], pred[i], zero_division=0.0))
        assert got["roc_auc_hallucination"][i] == pytest.approx(roc_auc_score(y[i], score[i]))


def test_average_ranks_equal_scipy_with_ties_and_negative_values() -> None:
    rng = np.random.default_rng(3)
    values = np.round(rng.normal(size=(25, 40)), 1)  # many ties, both signs
    assert np.array_equal(_average_ranks(values), rankdata(values, axis=1))
    assert np.array_equal(_average_ranks(np.zeros((2, 5))), np.full((2, 5), 3.0))  # one tie over the whole row


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_point_estimates_of_a_calibration_equal_scikit_learn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 70
    keys = [f"r{i}" for i in range(n)]
    halluc = np.round(rng.random(n), 1)  # ties on purpose
    labels = rng.random(n) < (0.2 + 0.6 * halluc)
    joined = attach_labels(_scored(keys, halluc.tolist()),
                           pl.DataFrame({"conversation_id": keys, "label_hallucinated": labels.tolist()}),
                           ["conversation_id"])
    row = calibrate(joined, CalibrationConfig(threshold=0.5, bootstrap=0)).row(0, named=True)
    pred = halluc > 0.5
    assert row["balanced_accuracy"] == pytest.approx(balanced_accuracy_score(labels, pred))
    assert row["kappa"] == pytest.approx(cohen_kappa_score(labels, pred))
    assert row["precision"] == pytest.approx(precision_score(labels, pred, zero_division=0.0))
    assert row["recall"] == pytest.approx(recall_score(labels, pred, zero_division=0.0))
    assert row["f1"] == pytest.approx(f1_score(labels, pred, zero_division=0.0))
    assert row["roc_auc_hallucination"] == pytest.approx(roc_auc_score(labels, halluc))
    assert row["roc_auc_faithfulness"] == pytest.approx(roc_auc_score(labels, -(1 - halluc)))


def test_a_constant_prediction_has_kappa_zero_and_precision_zero_as_scikit_learn_says() -> None:
    keys = [f"r{i}" for i in range(6)]
    labels = [True, False, True, False, False, True]
    joined = attach_labels(_scored(keys, [0.1] * 6), pl.DataFrame({"conversation_id": keys,
                                                                   "label_hallucinated": labels}),
                           ["conversation_id"])
    row = calibrate(joined, CalibrationConfig(threshold=0.5, bootstrap=0)).row(0, named=True)
    never = [False] * 6
    assert row["kappa"] == pytest.approx(cohen_kappa_score(labels, never)) == 0.0
    assert row["precision"] == precision_score(labels, never, zero_division=0.0) == 0.0
    assert row["f1"] == 0.0 and row["balanced_accuracy"] == pytest.approx(0.5)
    assert row["roc_auc_hallucination"] == pytest.approx(0.5)  # every score tied


def test_a_small_table_gives_the_hand_counted_numbers_overall_and_per_group() -> None:
    keys = [f"r{i}" for i in range(8)]
    #            tp    fn   fp   tn   tp   tn   tn   fn
    halluc = [0.9, 0.0, 0.8, 0.1, 0.6, 0.0, 0.2, 0.4]
    labels = [True, True, False, False, True, False, False, True]
    languages = ["en", "en", "en", "en", "zh", "zh", "ko", "ko"]
    scored = _scored(keys, halluc, language=languages)
    joined = attach_labels(scored, pl.DataFrame({"conversation_id": keys, "label_hallucinated": labels}),
                           ["conversation_id"])
    table = calibrate(joined, CalibrationConfig(threshold=0.5, group_columns=("language", "absent"), bootstrap=200))
    overall = table.filter(pl.col("group_by") == "all").row(0, named=True)
    assert (overall["tp"], overall["fn"], overall["fp"], overall["tn"]) == (2, 2, 1, 3)
    assert overall["n"] == 8 and overall["hallucinated"] == 4
    assert overall["balanced_accuracy"] == pytest.approx((2 / 4 + 3 / 4) / 2)
    assert overall["precision"] == pytest.approx(2 / 3) and overall["recall"] == pytest.approx(0.5)
    assert overall["roc_auc_hallucination"] == pytest.approx(roc_auc_score(labels, halluc))
    # best threshold: score > 0.2 catches three of four hallucinated rows (not the one scored 0) with the 0.8
    # as its only false positive; 0.1 or 0.4 do worse
    assert overall["best_threshold"] == pytest.approx(0.2)
    assert overall["best_balanced_accuracy"] == pytest.approx((3 / 4 + 3 / 4) / 2)
    assert overall["balanced_accuracy_low"] <= overall["balanced_accuracy"] <= overall["balanced_accuracy_high"]
    groups = {r["group"]: r for r in table.filter(pl.col("group_by") == "language").iter_rows(named=True)}
    assert set(groups) == {"en", "zh", "ko"}
    assert groups["en"]["n"] == 4 and groups["en"]["balanced_accuracy"] == pytest.approx(0.5)
    assert groups["zh"]["balanced_accuracy"] == pytest.approx(1.0)
    assert groups["ko"]["balanced_accuracy"] == pytest.approx(0.5)
    assert "absent" not in table.get_column("group_by").to_list()


def test_the_bootstrap_is_seeded() -> None:
    rng = np.random.default_rng(1)
    keys = [f"r{i}" for i in range(50)]
    scored = _scored(keys, [float(x) for x in np.round(rng.random(50), 2)])
    labels = pl.DataFrame({"conversation_id": keys, "label_hallucinated": (rng.random(50) < 0.5).tolist()})
    joined = attach_labels(scored, labels, ["conversation_id"])
    columns = ["balanced_accuracy_low", "balanced_accuracy_high", "kappa_low", "roc_auc_hallucination_high"]
    first = calibrate(joined, CalibrationConfig(seed=3)).select(columns)
    again = calibrate(joined, CalibrationConfig(seed=3)).select(columns)
    other = calibrate(joined, CalibrationConfig(seed=4)).select(columns)
    assert first.equals(again)
    assert not first.equals(other)


def test_one_class_leaves_agreement_unmeasured_and_the_floor_says_so() -> None:
    joined = attach_labels(_scored(["a", "b"], [0.9, 0.0]),
                           pl.DataFrame({"conversation_id": ["a", "b"], "label_hallucinated": [True, True]}),
                           ["conversation_id"])
    table = calibrate(joined, CalibrationConfig())
    row = table.row(0, named=True)
    assert row["balanced_accuracy"] is None and row["roc_auc_hallucination"] is None and row["kappa"] is None
    assert row["recall"] == pytest.approx(0.5)
    assert "cannot be measured" in below_floor(table, 0.6)[0]


def test_error_rows_and_unlabelled_rows_are_counted_not_dropped() -> None:
    keys = ["a", "b", "c", "d", "e"]
    scored = _scored(keys, [0.9, None, 0.0, 0.7, 0.1])
    labels = pl.DataFrame({"conversation_id": keys, "label_hallucinated": [True, True, False, None, False]})
    row = calibrate(attach_labels(scored, labels, ["conversation_id"]), CalibrationConfig()).row(0, named=True)
    assert (row["rows"], row["unscored"], row["unlabelled"], row["n"]) == (5, 1, 1, 3)


def test_faithfulness_labels_alone_give_the_binary_label_and_a_mean_error() -> None:
    scored = _scored(["a", "b", "c"], [0.0, 0.5, 1.0])
    labels = pl.DataFrame({"conversation_id": ["a", "b", "c"], "label_faithfulness": [1.0, 0.5, 0.0]})
    row = calibrate(attach_labels(scored, labels, ["conversation_id"]), CalibrationConfig(threshold=0.4)).row(
        0, named=True)
    assert row["hallucinated"] == 2 and row["balanced_accuracy"] == pytest.approx(1.0)
    assert row["faithfulness_mae"] == pytest.approx(0.0) and row["faithfulness_labelled"] == 3


def test_two_judges_in_one_table_and_the_rows_where_they_disagree() -> None:
    keys = ["a", "b", "c", "d"]
    labels = pl.DataFrame({"conversation_id": keys, "label_hallucinated": [True, False, True, False]})
    a = attach_labels(_scored(keys, [0.9, 0.0, 0.0, 0.0], "judge-a"), labels, ["conversation_id"])
    b = attach_labels(_scored(keys, [0.9, 0.8, 0.7, 0.0], "judge-b"), labels, ["conversation_id"])
    both = pl.concat([a, b]).with_columns(pl.col("judge_model").alias("judge"))
    config = CalibrationConfig(bootstrap=0)
    table = calibrate(both, config)
    assert table.filter(pl.col("group_by") == "all").get_column("judge").to_list() == ["judge-a", "judge-b"]
    split = disagreements(both, ["conversation_id"], config)
    assert split.get_column("conversation_id").to_list() == ["b", "b", "c", "c"]
    right = split.filter(pl.col("agrees_with_label")).select("conversation_id", "judge").rows()
    assert right == [("b", "judge-a"), ("c", "judge-b")]
    text = calibration_markdown(table)
    assert "judge-a" in text and "judge-b" in text and "0 resamples" in text


def test_keys_tie_labels_to_scores_with_the_turn_and_every_labelled_row_needs_a_score() -> None:
    scored = _scored(["a", "a", "b"], [0.9, 0.0, 0.0], turn=[0, 1, 0])
    labels = pl.DataFrame({"conversation_id": ["a", "b"], "turn": [1, 0], "label_hallucinated": [False, False]})
    keys = key_columns(labels, scored, id_column="conversation_id", turn_column="turn", key_column=None)
    assert keys == ["conversation_id", "turn"]
    joined = attach_labels(scored, labels, keys)
    assert joined.get_column("hallucination_score").to_list() == [0.0, 0.0]
    missing = pl.DataFrame({"conversation_id": ["a", "zz"], "turn": [0, 0], "label_hallucinated": [True, False]})
    with pytest.raises(InputError, match=r"1 labelled row\(s\) have no row in the scored table.*zz"):
        attach_labels(scored, missing, keys)
    with pytest.raises(InputError, match="lacks the key column"):
        key_columns(labels.drop("conversation_id"), scored, id_column="conversation_id", turn_column="turn",
                    key_column=None)


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (pl.DataFrame({"conversation_id": ["a"], "verdict": [True]}), "neither 'label_hallucinated'"),
        (pl.DataFrame({"conversation_id": ["a"], "label_hallucinated": ["yes"]}), "must be a bool column"),
        (pl.DataFrame({"conversation_id": ["a"], "label_faithfulness": [1.5]}), r"must lie in \[0, 1\]"),
        (pl.DataFrame({"conversation_id": ["a", "a"], "label_hallucinated": [True, False]}), "more than once"),
    ],
)
def test_a_bad_labelled_table_is_one_clear_error(labels: pl.DataFrame, message: str) -> None:
    def use() -> None:
        check_labels(labels)
        attach_labels(_scored(["a"], [0.0]), labels, ["conversation_id"])

    with pytest.raises(InputError, match=message) as info:
        use()
    assert "\n" not in str(info.value)


def test_best_threshold_prefers_the_lowest_of_equal_thresholds() -> None:
    y = np.array([True, False, True, False])
    score = np.array([0.5, 0.0, 0.5, 0.0])
    assert best_threshold(y, score) == (0.0, 1.0)
    assert best_threshold(np.array([True, True]), np.array([0.1, 0.2])) == (None, None)


def test_claim_labels_are_matched_to_the_judges_claims_by_text_and_scored() -> None:
    verdict = pl.Struct({"claim": pl.String, "verdict": pl.String, "speculative": pl.Boolean, "reason": pl.String,
                         "evidence": pl.String})

    def v(claim: str, code: str) -> dict[str, object]:
        return {"claim": claim, "verdict": code, "speculative": False, "reason": "", "evidence": None}

    scored = _scored(["a", "b"], [0.5, 0.0], language=["en", "zh"]).with_columns(pl.Series("verdicts", [
        [v("Paris is in France.", "supported"), v("It has 9 million people.", "contradicted")],
        [v("长城很长。", "supported")],
    ], dtype=pl.List(verdict)))
    labels = pl.DataFrame({"conversation_id": ["a", "b"], "label_hallucinated": [True, False]})
    claims = pl.DataFrame({
        "conversation_id": ["a", "a", "a", "b"],
        # case, spacing and the final full stop do not count; a claim the judge never made is unmatched
        "claim": ["paris is in  France", "It has 9 million people.", "It is old.", "长城很长"],
        "label_verdict": ["supported", "Unsupported", "supported", "contradicted"],
    })
    joined = attach_labels(scored, labels, ["conversation_id"])
    table = calibrate(joined, CalibrationConfig(bootstrap=0, group_columns=("language",)), claims, ["conversation_id"])
    overall = table.filter(pl.col("group_by") == "all").row(0, named=True)
    assert (overall["claims_labelled"], overall["claims_matched"]) == (4, 3)
    assert overall["claim_verdict_accuracy"] == pytest.approx(1 / 3)  # only the Paris claim has the same verdict
    # not-supported vs supported: a right, a's second right (contradicted vs unsupported), b wrong
    assert overall["claim_balanced_accuracy"] == pytest.approx((1 / 2 + 1) / 2)
    zh = table.filter(pl.col("group") == "zh").row(0, named=True)
    assert (zh["claims_labelled"], zh["claims_matched"], zh["claim_verdict_accuracy"]) == (1, 1, 0.0)
    assert "3 of 4 labelled claims found" in calibration_markdown(table)
    with pytest.raises(InputError, match="label_verdict"):
        calibrate(joined, CalibrationConfig(), claims.with_columns(pl.lit("maybe").alias("label_verdict")),
                  ["conversation_id"])


def test_the_paired_difference_uses_the_rows_both_judges_scored_and_the_same_resamples() -> None:
    keys = [f"r{i}" for i in range(40)]
    rng = np.random.default_rng(5)
    truth = (rng.random(40) < 0.5).tolist()
    labels = pl.DataFrame({"conversation_id": keys, "label_hallucinated": truth})
    good = [0.9 if t else 0.0 for t in truth]
    bad = [0.9 if (t if i % 3 else not t) else 0.0 for i, t in enumerate(truth)]
    bad[0] = None  # an error row of the second judge: compared on the 39 rows both scored
    a = attach_labels(_scored(keys, good, "judge-a"), labels, ["conversation_id"])
    b = attach_labels(_scored(keys, bad, "judge-b"), labels, ["conversation_id"])
    both = pl.concat([a, b]).with_columns(pl.col("judge_model").alias("judge"))
    same = paired_differences(pl.concat([a, a.with_columns(pl.lit("judge-a2").alias("judge_model"))])
                              .with_columns(pl.col("judge_model").alias("judge")), ["conversation_id"],
                              CalibrationConfig(bootstrap=200)).row(0, named=True)
    assert (same["balanced_accuracy_difference"], same["low"], same["high"]) == (0.0, 0.0, 0.0)  # paired: no noise
    row = paired_differences(both, ["conversation_id"], CalibrationConfig(bootstrap=200)).row(0, named=True)
    assert row["n"] == 39 and row["judge"] == "judge-b" and row["reference"] == "judge-a"
    y = np.array(truth[1:])
    predicted = np.array(bad[1:]) > 0.5
    assert row["balanced_accuracy_difference"] == pytest.approx(balanced_accuracy_score(y, predicted) - 1.0)
    assert row["low"] <= row["balanced_accuracy_difference"] <= row["high"] < 0
