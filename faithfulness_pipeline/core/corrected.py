"""Corrected figures: each published rate of a group of answers estimated from the judge's figure on every row
and people's labels on a random subset (``core.ppi``), beside the judge's raw figure.

Three figures, each a mean over the group's scored answers (status ``ok`` with a score):

- ``over_threshold_share``: the share of answers people call hallucinated (``label_hallucinated``, else
  ``label_faithfulness < 1``), from the judge's flag ``hallucination_score > threshold``;
- ``hallucination_mean``: the share of an answer people find unsupported (``1 - label_faithfulness``, times
  the scale), from the judge's ``hallucination_score``;
- ``faithfulness_mean``: the share people find supported (``label_faithfulness`` times the scale), from the
  judge's ``faithfulness_score``.

Labels are tied to scored rows by ``row_key``. Several reviewers of one answer count as the mean of their
labels (a split answer is half hallucinated), and the answers they split on are counted. A label whose row is
not among the scored rows, or whose row the judge did not score (an error, a row outside the judging sample),
cannot correct anything: it is counted and named, never dropped without a word. Where the labels carry the
audit sample's ``inclusion_probability``, each labelled row weighs its inverse, so a stratified sample
estimates the group it was drawn from.

A group with fewer than ``min_labels`` labelled answers of its own borrows the judge's error from the pooled
labels of its ``pool_by`` group (the same judge model, prompt version and language over every day given):
its estimate assumes that error is the same on this group's rows as over the pool, and the table says so
(``labels_from``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Final, TypeVar

import numpy as np
import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.labels import LABEL_COLUMNS, LABEL_FAITHFULNESS, binary_label, check_labels, key_columns
from faithfulness_pipeline.core.ppi import MIN_LABELS, Corrected, Judged, ppi_mean

Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)

#: The figures corrected, each the mean of (people's value, the judge's value).
FIGURES: Final = ("over_threshold_share", "hallucination_mean", "faithfulness_mean")
#: Where a group's labels came from.
FROM_GROUP: Final = "group"
FROM_POOL: Final = "pooled"
FROM_NONE: Final = "none"
INCLUSION: Final = "inclusion_probability"
REVIEWER: Final = "reviewer"
_Y, _F, _W = "__fp_y_", "__fp_f_", "__fp_weight"
_REVIEWERS, _SPLIT = "__fp_reviewers", "__fp_split"
_EXAMPLES: Final = 5


@dataclass(frozen=True, slots=True)
class EstimateConfig:
    threshold: float = 0.5
    scale: float = 1.0
    level: float = 0.95
    min_labels: int = MIN_LABELS
    #: Columns whose groups lend their labels to a group with too few: the judge's error is assumed the same
    #: within them (those present are used).
    pool_by: tuple[str, ...] = ("judge_model", "prompt_version", "language")


@dataclass
class LabelCount:
    """What became of the labels: used, and the ones that could not be (counted, with a few keys each)."""

    labelled_rows: int = 0
    used: int = 0
    unmatched: list[str] = field(default_factory=list)
    unmatched_count: int = 0
    unjudged: list[str] = field(default_factory=list)
    unjudged_count: int = 0
    split: list[str] = field(default_factory=list)
    split_count: int = 0

    def lines(self) -> list[str]:
        out = [f"{self.used} of {self.labelled_rows} labelled answer(s) correct the figures"]
        if self.unmatched_count:
            out.append(f"{self.unmatched_count} labelled answer(s) match no scored row (not used), e.g. "
                       f"{self.unmatched[:_EXAMPLES]}")
        if self.unjudged_count:
            out.append(f"{self.unjudged_count} labelled answer(s) were not scored by the judge (error, not sampled "
                       f"or skipped: not used), e.g. {self.unjudged[:_EXAMPLES]}")
        if self.split_count:
            out.append(f"{self.split_count} answer(s) have reviewers who disagree (each counts as the mean of its "
                       f"labels), e.g. {self.split[:_EXAMPLES]}")
        return out


def _per_answer(labels: pl.DataFrame) -> pl.DataFrame:
    """One row per labelled answer: the mean of its reviewers' labels, how many there were, whether they split."""
    flag = binary_label(labels).cast(pl.Float64).alias("__fp_flag")
    faith = (pl.col(LABEL_FAITHFULNESS).cast(pl.Float64) if LABEL_FAITHFULNESS in labels.columns
             else pl.lit(None, dtype=pl.Float64)).alias("__fp_faith")
    inclusion = (pl.col(INCLUSION).cast(pl.Float64) if INCLUSION in labels.columns
                 else pl.lit(None, dtype=pl.Float64)).alias(INCLUSION)
    rows = labels.select(pl.col(S.ROW_KEY).cast(pl.String), flag, faith, inclusion)
    return rows.group_by(S.ROW_KEY, maintain_order=True).agg(
        pl.col("__fp_flag").mean(), pl.col("__fp_faith").mean(), pl.col(INCLUSION).first(),
        pl.len().alias(_REVIEWERS),
        ((pl.col("__fp_flag").max() != pl.col("__fp_flag").min()).fill_null(False)).alias(_SPLIT),
    )


def _values(frame: Frame, config: EstimateConfig) -> Frame:
    """The judge's and people's value of each figure, row by row (people's null where the row has no label)."""
    scale = config.scale
    return frame.with_columns(
        (pl.col("hallucination_score") > config.threshold).cast(pl.Float64).alias(f"{_F}over_threshold_share"),
        pl.col("hallucination_score").cast(pl.Float64).alias(f"{_F}hallucination_mean"),
        pl.col("faithfulness_score").cast(pl.Float64).alias(f"{_F}faithfulness_mean"),
        pl.col("__fp_flag").alias(f"{_Y}over_threshold_share"),
        ((1 - pl.col("__fp_faith")) * scale).alias(f"{_Y}hallucination_mean"),
        (pl.col("__fp_faith") * scale).alias(f"{_Y}faithfulness_mean"),
        (1 / pl.col(INCLUSION)).alias(_W),
    )


def labelled_scores(scored: Frame, labels: pl.DataFrame, config: EstimateConfig) -> tuple[Frame, LabelCount]:
    """The scored answers the judge scored, each with its people's values where it has labels, and what became
    of the labels. ``labels`` holds ``row_key`` and ``label_hallucinated`` and/or ``label_faithfulness``
    (several rows per key: several reviewers), optionally ``inclusion_probability``. Lazy ``scored`` gives lazy
    values: only the labelled rows' keys are collected here (a month's rows stay on disk)."""
    answers = _per_answer(labels)
    count = LabelCount(labelled_rows=answers.height)
    split = answers.filter(pl.col(_SPLIT))
    count.split_count, count.split = split.height, split.get_column(S.ROW_KEY).head(_EXAMPLES).to_list()
    frame = scored.lazy()
    key = pl.col(S.ROW_KEY).cast(pl.String)
    is_labelled = pl.col(S.ROW_KEY).is_in(answers.get_column(S.ROW_KEY).implode())
    judged = frame.filter((pl.col("status") == S.STATUS_OK) & pl.col("hallucination_score").is_not_null()).with_columns(
        key)
    # The rows without a label get null people's values, the labelled ones (1 % of a month) are joined to their
    # labels: a join of every row buffers the scored side in the streaming engine, a filter streams. The
    # labelled rows come after the others (each part in the table's order).
    people = answers.drop(_REVIEWERS, _SPLIT)
    unlabelled = judged.filter(~is_labelled).with_columns(
        pl.lit(None, dtype=people.schema[c]).alias(c) for c in people.columns if c != S.ROW_KEY)
    labelled = judged.filter(is_labelled).join(people.lazy(), on=S.ROW_KEY, how="left", maintain_order="left")
    joined = pl.concat([unlabelled, labelled])
    # Only the scored rows of labelled keys: the status of every scored row would be the whole table's keys.
    keys, used = _collect([frame.select(key, "status").filter(is_labelled),
                           labelled.select(pl.col("__fp_flag").is_not_null().sum())], isinstance(scored, pl.LazyFrame))
    matched = answers.join(keys, on=S.ROW_KEY, how="left", maintain_order="left")
    unmatched = matched.filter(pl.col("status").is_null())
    count.unmatched_count, count.unmatched = unmatched.height, unmatched.get_column(S.ROW_KEY).head(_EXAMPLES).to_list()
    unjudged = matched.filter(pl.col("status").is_not_null() & (pl.col("status") != S.STATUS_OK))
    count.unjudged_count, count.unjudged = unjudged.height, unjudged.get_column(S.ROW_KEY).head(_EXAMPLES).to_list()
    count.used = int(used.item())
    values = _values(joined, config)
    if isinstance(scored, pl.LazyFrame):
        return values, count
    return values.collect(), count


def _collect(queries: list[pl.LazyFrame], streaming: bool) -> list[pl.DataFrame]:
    """Each query collected on its own, by the streaming engine where the rows are on disk: ``collect_all``
    would scan the table once and hold it for all of them (measured on 30 days of bench/corrected_month.py's
    light columns: 0.2 GB more)."""
    return [query.collect(engine="streaming" if streaming else "auto") for query in queries]


def _corrected(f_all: np.ndarray | Judged, lenders: pl.DataFrame, figure: str, config: EstimateConfig,
               within: bool) -> Corrected:
    """One figure of one group: the group's judge values (or their sums), the lenders' labelled rows (the
    group's own when ``within``)."""
    labelled = lenders.filter(pl.col(f"{_Y}{figure}").is_not_null() & pl.col(f"{_F}{figure}").is_not_null())
    weights = labelled.get_column(_W)
    return ppi_mean(labelled.get_column(f"{_Y}{figure}").to_numpy(), labelled.get_column(f"{_F}{figure}").to_numpy(),
                    f_all, weights=None if weights.null_count() else weights.to_numpy(), level=config.level,
                    within=within, bounds=(0.0, 1.0 if figure == "over_threshold_share" else config.scale),
                    min_labels=config.min_labels)


def _sums(values: pl.LazyFrame, by: Sequence[str]) -> pl.LazyFrame:
    """Per group of ``by``: its answers, and of each figure the judge's values' count, mean and squared
    deviations (:class:`core.ppi.Judged`): all the estimate needs of the rows without a label, folded by the
    streaming engine so that a month never sits in memory."""
    sums: list[pl.Expr] = [pl.len().alias("answers")]
    for figure in FIGURES:
        judge = pl.col(f"{_F}{figure}")
        sums += [judge.count().alias(f"__fp_n_{figure}"), judge.mean().alias(f"__fp_mean_{figure}"),
                 (judge.var(ddof=0) * judge.count()).alias(f"__fp_m2_{figure}")]
    return values.group_by(by).agg(sums) if by else values.select(sums)


def _judged(group: dict[str, object], figure: str) -> Judged:
    count, mean, squares = (group[f"__fp_{part}_{figure}"] for part in ("n", "mean", "m2"))
    assert isinstance(count, int)
    return Judged(count, float(mean) if isinstance(mean, float) else 0.0,
                  float(squares) if isinstance(squares, float) else 0.0)


def estimate_groups(values: Frame, by: Sequence[str], config: EstimateConfig,
                    pool: pl.DataFrame | pl.LazyFrame | None = None) -> pl.DataFrame:
    """One row per group of ``by`` (every row when empty): for each figure the judge's raw value, the corrected
    value and its interval, and where the group's labels came from (:func:`labelled_scores` makes ``values``).
    ``pool``: the labelled rows a group with too few labels may borrow from (other days' too), in the same
    shape; by default ``values`` itself. Of the rows without a label only sums per group are kept (lazy
    ``values`` are folded by the streaming engine): the labelled rows and the groups' pool keys are collected."""
    schema = values.collect_schema()
    pool_names = schema.names() if pool is None else pool.collect_schema().names()
    by = [c for c in by if c in schema]
    pool_by: list[str] = [c for c in config.pool_by if c in schema and c in pool_names]
    labelled_y = pl.col(f"{_Y}{FIGURES[0]}").is_not_null()
    rows = values.lazy()
    queries = [_sums(rows, by), rows.filter(labelled_y), rows.select(list(dict.fromkeys([*by, *pool_by]))).unique()]
    if pool is not None:
        queries.append(pool.lazy().filter(labelled_y))
    collected = _collect(queries, isinstance(values, pl.LazyFrame))
    sums, labelled, combos = collected[:3]
    lent = collected[3] if pool is not None else labelled

    def groups(frame: pl.DataFrame) -> dict[tuple[object, ...], pl.DataFrame]:
        return frame.partition_by(by, maintain_order=True, as_dict=True) if by else {(): frame}

    own_labels, pool_keys = groups(labelled), groups(combos)
    keyed = {tuple(group[c] for c in by): group for group in sums.iter_rows(named=True)}
    out = []
    for key, group in sorted(keyed.items(), key=lambda item: tuple("" if v is None else str(v) for v in item[0])):
        lenders = own_labels.get(key, labelled.clear())
        own, source = lenders.height, FROM_GROUP
        if own < config.min_labels:
            lending = lent.join(pool_keys.get(key, combos.clear()).select(pool_by).unique(), on=pool_by, how="semi",
                                nulls_equal=True) if pool_by else lent
            lenders, source = (lending, FROM_POOL) if lending.height >= config.min_labels else (lenders, FROM_NONE)
        record: dict[str, object] = dict(zip(by, key, strict=True))
        record.update(answers=group["answers"], labelled_answers=own, labels_from=source,
                      pooled_labels=lenders.height if source == FROM_POOL else 0)
        for figure in FIGURES:
            judged = _judged(group, figure)
            result = _corrected(judged, lenders, figure, config, within=source == FROM_GROUP)
            record[figure] = judged.mean if judged.count else None
            usable = source != FROM_NONE and result.low is not None
            record[f"{figure}_corrected"] = result.estimate if usable else None
            record[f"{figure}_corrected_low"] = result.low if usable else None
            record[f"{figure}_corrected_high"] = result.high if usable else None
        out.append(record)
    return pl.DataFrame(out, schema=_schema(schema, by), orient="row") if out else pl.DataFrame(
        schema=_schema(schema, by))


def _schema(schema: pl.Schema, by: Sequence[str]) -> pl.Schema:
    columns: dict[str, pl.DataType] = {c: schema[c] for c in by}
    columns.update(answers=pl.Int64(), labelled_answers=pl.Int64(), labels_from=pl.String(), pooled_labels=pl.Int64())
    for figure in FIGURES:
        columns.update({figure: pl.Float64(), f"{figure}_corrected": pl.Float64(),
                        f"{figure}_corrected_low": pl.Float64(), f"{figure}_corrected_high": pl.Float64()})
    return pl.Schema(columns)


def spread(values: pl.DataFrame, figure: str = "over_threshold_share") -> tuple[float, float, float]:
    """(people's variance, the residual variance at the tuned ``lam``, the judge's variance) of ``figure`` over
    the labelled rows of ``values``: what :func:`core.ppi.labels_needed` sizes a sample with."""
    from faithfulness_pipeline.core.ppi import tuned_lambda

    labelled = values.filter(pl.col(f"{_Y}{figure}").is_not_null() & pl.col(f"{_F}{figure}").is_not_null())
    y = labelled.get_column(f"{_Y}{figure}").to_numpy()
    f = labelled.get_column(f"{_F}{figure}").to_numpy()
    f_all = values.get_column(f"{_F}{figure}").drop_nulls().to_numpy()
    if len(y) < 2:
        return 0.25, 0.25, 0.0  # nothing measured: the widest a 0-1 value can vary
    lam = tuned_lambda(y, f, f_all)
    return float(np.var(y)), float(np.var(y - lam * f)), float(np.var(lam * f_all))


def keyed_labels(labels: pl.DataFrame, scored: pl.DataFrame | pl.LazyFrame, *, id_column: str, turn_column: str,
                 key_column: str | None) -> pl.DataFrame:
    """People's labels with the ``row_key`` of their scored rows: given, or found by the id and turn columns (or
    the key column) the scorer keys rows by. A label matching no scored row keeps its own key text, so that it
    is counted as unmatched (:func:`labelled_scores`), not lost. Of lazy ``scored`` only the labelled keys'
    rows are collected."""
    check_labels(labels)
    keys = key_columns(labels, pl.DataFrame(schema=scored.collect_schema()), id_column=id_column,
                       turn_column=turn_column, key_column=key_column)
    if keys != [S.ROW_KEY]:
        wanted = labels.select(pl.col(k).cast(pl.String) for k in keys).unique().lazy()
        index = scored.lazy().select(*[pl.col(k).cast(pl.String) for k in keys], S.ROW_KEY).join(
            wanted, on=keys, how="semi").unique(keys).collect(
            engine="streaming" if isinstance(scored, pl.LazyFrame) else "auto")
        own = pl.concat_str([pl.col(k).cast(pl.String) for k in keys], separator="#")
        labels = labels.drop(S.ROW_KEY, strict=False).with_columns(pl.col(k).cast(pl.String) for k in keys).join(
            index, on=keys, how="left").with_columns(pl.col(S.ROW_KEY).fill_null(own))
    return labels.select([c for c in labels.columns if c in (S.ROW_KEY, *LABEL_COLUMNS, INCLUSION, REVIEWER)])


def corrected_difference(baseline: pl.DataFrame, candidate: pl.DataFrame, config: EstimateConfig) -> pl.DataFrame:
    """Per figure, the corrected figure of two groups of answers (two app versions, two models: different answers,
    each with labels of its own) and their difference with its interval; ``verdict`` says whether it excludes 0.
    Each side is :func:`labelled_scores`' values of its rows."""
    z = NormalDist().inv_cdf(0.5 + config.level / 2)
    rows = []
    for figure in FIGURES:
        sides = [_corrected(values.get_column(f"{_F}{figure}").drop_nulls().to_numpy(), values, figure, config,
                            within=True) for values in (baseline, candidate)]
        base, cand = sides
        if base.se is None or cand.se is None or base.estimate is None or cand.estimate is None:
            rows.append({"figure": figure, "baseline": base.estimate, "candidate": cand.estimate,
                         "baseline_labels": base.labelled, "candidate_labels": cand.labelled, "difference": None,
                         "low": None, "high": None, "verdict": "too few labels"})
            continue
        difference = cand.estimate - base.estimate
        half = z * (base.se**2 + cand.se**2) ** 0.5
        # A census on both sides leaves no doubt: only a difference beyond float noise is one.
        larger = difference - half > 1e-12 or difference + half < -1e-12
        rows.append({"figure": figure, "baseline": base.estimate, "candidate": cand.estimate,
                     "baseline_labels": base.labelled, "candidate_labels": cand.labelled, "difference": difference,
                     "low": difference - half, "high": difference + half,
                     "verdict": "larger than noise" if larger else "within noise"})
    return pl.DataFrame(rows, schema={"figure": pl.String, "baseline": pl.Float64, "candidate": pl.Float64,
                                      "baseline_labels": pl.Int64, "candidate_labels": pl.Int64,
                                      "difference": pl.Float64, "low": pl.Float64, "high": pl.Float64,
                                      "verdict": pl.String})


def window_agreement(values: pl.DataFrame, pool: pl.DataFrame, by: Sequence[str],
                     config: EstimateConfig) -> pl.DataFrame:
    """Per group of ``by``: the p-value of a two-sample test that the judge errs alike on the group's own labelled
    answers and on its pool's other labelled answers (the mean of people's value minus the judge's, share over
    the threshold). A small one says the pool's labels describe another judge error than the group's: what the
    pooled estimate of a group with too few labels assumes away. Null where either side has fewer than 2."""
    by = [c for c in by if c in values.columns]
    pool_by = [c for c in config.pool_by if c in values.columns and c in pool.columns]
    y, f = f"{_Y}over_threshold_share", f"{_F}over_threshold_share"
    error = (pl.col(y) - pl.col(f)).alias("__fp_error")
    labelled_pool = pool.filter(pl.col(y).is_not_null()).select(S.ROW_KEY, *pool_by, error)
    rows = []
    groups = values.partition_by(by, maintain_order=True, as_dict=True) if by else {(): values}
    for key, group in groups.items():
        own = group.filter(pl.col(y).is_not_null()).select(S.ROW_KEY, error)
        others = labelled_pool.join(group.select(pool_by).unique(), on=pool_by, how="semi", nulls_equal=True) \
            if pool_by else labelled_pool
        others = others.join(own.select(S.ROW_KEY), on=S.ROW_KEY, how="anti")
        record: dict[str, object] = dict(zip(by, key, strict=True))
        record["window_agreement_p"] = _two_sample_p(own.get_column("__fp_error").to_numpy(),
                                                     others.get_column("__fp_error").to_numpy())
        rows.append(record)
    schema = {**{c: values.schema[c] for c in by}, "window_agreement_p": pl.Float64()}
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)


def _two_sample_p(a: np.ndarray, b: np.ndarray) -> float | None:
    """Two-sided p-value of the difference of two means (normal, unequal variances); None below 2 a side."""
    if len(a) < 2 or len(b) < 2:
        return None
    se = float(np.sqrt(np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b)))
    difference = float(np.mean(a) - np.mean(b))
    if se == 0.0:
        return 1.0 if difference == 0.0 else 0.0
    return 2 * (1 - NormalDist().cdf(abs(difference) / se))
