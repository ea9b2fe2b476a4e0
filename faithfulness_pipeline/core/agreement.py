"""How far people who labelled the same answers agree with each other (``review agreement``, the review page's
progress line).

Each label is read as yes/no, hallucinated or not (``core.labels.binary_label``: ``label_hallucinated``, else
``label_faithfulness < 1``). For every pair of reviewers, on the answers both labelled: how many, how many
they gave the same mark, and Cohen's kappa, their agreement beyond what each one's own share of
"hallucinated" would give by chance (``core.calibration.cohen_kappa``). An answer the reviewers split on is
listed with who said what: with several reviewers of one answer the corrected figures count it as the mean
of their marks, half hallucinated for a 1-1 split, and a reader should know which answers those are.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Final

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.calibration import cohen_kappa
from faithfulness_pipeline.core.corrected import REVIEWER
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.core.labels import binary_label, check_labels

_MARK: Final = "__fp_mark"

PAIRS_SCHEMA: Final = pl.Schema({
    "reviewer_a": pl.String(), "reviewer_b": pl.String(), "answers": pl.Int64(), "agreeing": pl.Int64(),
    "share_agreeing": pl.Float64(), "kappa": pl.Float64(),
})
SPLIT_SCHEMA: Final = pl.Schema({
    S.ROW_KEY: pl.String(), "hallucinated_by": pl.List(pl.String()), "not_hallucinated_by": pl.List(pl.String()),
})


@dataclass(frozen=True, slots=True)
class Agreement:
    """``pairs``: one row per pair of reviewers who labelled an answer in common (:data:`PAIRS_SCHEMA`);
    ``split``: the answers whose reviewers gave different marks, with who gave which (:data:`SPLIT_SCHEMA`);
    ``reviewers``: each reviewer's labelled answers."""

    pairs: pl.DataFrame
    split: pl.DataFrame
    reviewers: dict[str, int]

    @property
    def shared(self) -> int:
        """Answers labelled by two reviewers or more."""
        return int(self.pairs.get_column("answers").sum()) if self.pairs.height else 0


def _marks(labels: pl.DataFrame) -> pl.DataFrame:
    """One yes/no mark per (answer, reviewer); a label with neither value is no mark."""
    missing = [c for c in (S.ROW_KEY, REVIEWER) if c not in labels.columns]
    if missing:
        raise InputError(f"agreement needs the labels' {', '.join(missing)} column(s); they have {labels.columns[:12]}")
    check_labels(labels)
    marks = labels.select(pl.col(S.ROW_KEY).cast(pl.String), pl.col(REVIEWER).cast(pl.String),
                          binary_label(labels).alias(_MARK)).drop_nulls()
    twice = marks.filter(pl.struct(S.ROW_KEY, REVIEWER).is_duplicated())
    if twice.height:
        shown = twice.select(S.ROW_KEY, REVIEWER).unique().head(3).rows()
        raise InputError(f"{twice.height} labels give a reviewer two marks of one answer, e.g. {shown}: keep one "
                         f"label per answer and reviewer")
    return marks


def reviewer_agreement(labels: pl.DataFrame) -> Agreement:
    """The agreement of the reviewers of ``labels`` (``row_key``, ``reviewer`` and a label column), pair by
    pair, and the answers they split on."""
    marks = _marks(labels)
    wide = marks.pivot(on=REVIEWER, index=S.ROW_KEY, values=_MARK, sort_columns=True) if marks.height else None
    names = sorted(marks.get_column(REVIEWER).unique().to_list())
    rows = []
    for first, second in combinations(names, 2):
        assert wide is not None
        both = wide.select(first, second).drop_nulls()
        if not both.height:
            continue
        a, b = (both.get_column(c).to_numpy().astype(bool) for c in (first, second))
        agreeing = int((a == b).sum())
        rows.append({"reviewer_a": first, "reviewer_b": second, "answers": both.height, "agreeing": agreeing,
                     "share_agreeing": agreeing / both.height, "kappa": cohen_kappa(a, b)})
    split = (marks.group_by(S.ROW_KEY).agg(
        pl.col(REVIEWER).filter(pl.col(_MARK)).sort().alias("hallucinated_by"),
        pl.col(REVIEWER).filter(~pl.col(_MARK)).sort().alias("not_hallucinated_by"))
        .filter((pl.col("hallucinated_by").list.len() > 0) & (pl.col("not_hallucinated_by").list.len() > 0))
        .sort(S.ROW_KEY))
    counts = dict(marks.group_by(REVIEWER).len().sort(REVIEWER).iter_rows())
    return Agreement(pl.DataFrame(rows, schema=PAIRS_SCHEMA), split.select(SPLIT_SCHEMA.names()),
                     {str(k): int(v) for k, v in counts.items()})
