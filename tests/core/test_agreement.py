"""Agreement between reviewers: Cohen's kappa equals scikit-learn's (and is the same whichever reviewer comes
first), each pair is measured on the answers both labelled only, and the answers they split on are named with
who said what."""

from __future__ import annotations

import warnings

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import cohen_kappa_score

from faithfulness_pipeline.core.agreement import reviewer_agreement
from faithfulness_pipeline.core.calibration import cohen_kappa
from faithfulness_pipeline.core.errors import InputError


def test_kappa_is_scikit_learns_and_symmetric() -> None:
    rng = np.random.default_rng(51)
    for _ in range(300):
        n = int(rng.integers(1, 40))
        a, b = rng.random(n) < rng.random(), rng.random(n) < rng.random()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scikit-learn warns where kappa is undefined, then gives NaN
            expected = cohen_kappa_score(a, b, labels=[False, True])
        ours = cohen_kappa(a, b)
        assert (ours is None) if np.isnan(expected) else ours == pytest.approx(expected, abs=1e-12)
        assert cohen_kappa(b, a) == ours
    assert cohen_kappa(np.array([], dtype=bool), np.array([], dtype=bool)) is None
    assert cohen_kappa(np.array([True, True]), np.array([True, True])) is None  # chance agrees on every answer


def test_each_pair_on_the_answers_both_labelled_and_the_split_answers_named() -> None:
    labels = pl.DataFrame({
        "row_key": ["a", "b", "c", "d", "a", "b", "c", "e", "a", "e"],
        "reviewer": ["ana", "ana", "ana", "ana", "bo", "bo", "bo", "bo", "chen", "chen"],
        "label_hallucinated": [True, False, True, False, True, True, True, False, None, None],
        # chen gave grades only: below 1 reads as hallucinated (core.labels.binary_label)
        "label_faithfulness": [None, None, None, None, None, None, None, None, 0.5, 1.0],
    })
    result = reviewer_agreement(labels)
    assert result.reviewers == {"ana": 4, "bo": 4, "chen": 2}
    pairs = {(r["reviewer_a"], r["reviewer_b"]): r for r in result.pairs.iter_rows(named=True)}
    assert set(pairs) == {("ana", "bo"), ("ana", "chen"), ("bo", "chen")}
    ana_bo = pairs["ana", "bo"]
    assert (ana_bo["answers"], ana_bo["agreeing"]) == (3, 2)  # a, b, c: only b differs (d and e are one-sided)
    assert ana_bo["share_agreeing"] == pytest.approx(2 / 3)
    assert ana_bo["kappa"] == pytest.approx(cohen_kappa_score([True, False, True], [True, True, True]))
    assert (pairs["ana", "chen"]["answers"], pairs["ana", "chen"]["agreeing"]) == (1, 1)
    assert pairs["ana", "chen"]["kappa"] is None  # one answer, one mark: undefined, never a number
    assert (pairs["bo", "chen"]["answers"], pairs["bo", "chen"]["agreeing"]) == (2, 2)
    assert result.split.to_dicts() == [{"row_key": "b", "hallucinated_by": ["bo"], "not_hallucinated_by": ["ana"]}]
    assert result.shared == 6


def test_no_pair_no_split_and_bad_labels_refused() -> None:
    alone = reviewer_agreement(pl.DataFrame({"row_key": ["a"], "reviewer": ["ana"], "label_hallucinated": [True]}))
    assert alone.pairs.is_empty() and alone.split.is_empty() and alone.shared == 0
    with pytest.raises(InputError, match="reviewer"):
        reviewer_agreement(pl.DataFrame({"row_key": ["a"], "label_hallucinated": [True]}))
    with pytest.raises(InputError, match="two marks of one answer"):
        reviewer_agreement(pl.DataFrame({"row_key": ["a", "a"], "reviewer": ["ana", "ana"],
                                         "label_hallucinated": [True, False]}))
