"""Two scorings side by side: is the difference between them larger than its noise?

Rows pair by a key (the row key: the same conversations scored by two judges; or a column such as the
question: the same questions answered by two app versions). Paired, the mean difference of each score gets a
t interval on the per-row differences and the share over the hallucination threshold McNemar's exact test;
unpaired, Welch's interval and a two-proportion test. A table that is a sample (rows ``not_sampled``) shrinks
its variance by the finite-population correction. Groups with fewer than ``min_rows`` say so instead of
showing an interval. Pure: frames in, frames out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.core.intervals import mcnemar_exact_p, normal_two_sided_p, t_quantile, t_two_sided_p

SCORES: Final = ("hallucination_score", "faithfulness_score")
TOO_FEW: Final = "too few rows"
LARGER: Final = "larger than noise"
WITHIN: Final = "within noise"
_B, _C = "_baseline", "_candidate"


@dataclass(frozen=True, slots=True)
class CompareConfig:
    threshold: float = 0.5  # hallucination above it counts as hallucinating (score units)
    level: float = 0.95
    min_rows: int = 10  # fewer rows (or pairs) in a group: no interval, "too few rows"


@dataclass(frozen=True, slots=True)
class Comparison:
    table: pl.DataFrame  # one row per score x group
    flips: pl.DataFrame  # paired rows that crossed the threshold, worst first
    paired: bool
    key: str
    pairs: int


def _judged(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.filter(pl.col("status") == S.STATUS_OK)


def correction(population: int, sampled: int) -> float:
    """The finite-population correction of ``sampled`` rows drawn from ``population`` (1: no sample)."""
    if population <= 1 or sampled >= population:
        return 1.0
    return math.sqrt((population - sampled) / (population - 1))


def _fpc(frame: pl.DataFrame) -> float:
    """The finite-population correction of a table that is a sample of its rows (1 when it is not)."""
    return correction(frame.height, frame.filter(pl.col("status") != S.STATUS_NOT_SAMPLED).height)


def verdict_of(n: int, low: float | None, high: float | None, config: CompareConfig) -> str:
    if n < config.min_rows or low is None or high is None:
        return TOO_FEW
    return LARGER if low > 0 or high < 0 else WITHIN


def _interval(diff: float, se: float, df: float, config: CompareConfig) -> tuple[float, float, float]:
    if se == 0:
        return diff, diff, 1.0 if diff == 0 else 0.0
    q = t_quantile(0.5 + config.level / 2, df)
    return diff - q * se, diff + q * se, t_two_sided_p(diff / se, df)


def paired_score(b: np.ndarray, c: np.ndarray, fpc: float, config: CompareConfig) -> dict[str, Any]:
    d = c - b
    n = len(d)
    out: dict[str, Any] = {"n_baseline": n, "n_candidate": n, "mean_baseline": _mean(b), "mean_candidate": _mean(c),
                           "difference": _mean(d), "low": None, "high": None, "p_value": None}
    if n >= max(2, config.min_rows):
        se = float(np.std(d, ddof=1)) / math.sqrt(n) * fpc
        out["low"], out["high"], out["p_value"] = _interval(float(np.mean(d)), se, n - 1, config)
    return out


@dataclass(frozen=True, slots=True)
class Side:
    """What Welch's interval needs of one side: its scores' count, mean and sample variance, and the
    finite-population correction of the table it is a sample of."""

    n: int
    mean: float | None
    var: float | None
    fpc: float = 1.0

    @staticmethod
    def of(values: np.ndarray, fpc: float = 1.0) -> Side:
        n = len(values)
        return Side(n, _mean(values), float(np.var(values, ddof=1)) if n > 1 else None, fpc)


def welch_score(b: np.ndarray, c: np.ndarray, fpc_b: float, fpc_c: float, config: CompareConfig) -> dict[str, Any]:
    return welch(Side.of(b, fpc_b), Side.of(c, fpc_c), config)


def welch(b: Side, c: Side, config: CompareConfig) -> dict[str, Any]:
    """Welch's interval on the difference of two sides' means (``c`` minus ``b``)."""
    nb, nc = b.n, c.n
    out: dict[str, Any] = {"n_baseline": nb, "n_candidate": nc, "mean_baseline": b.mean, "mean_candidate": c.mean,
                           "difference": None, "low": None, "high": None, "p_value": None}
    if b.mean is not None and c.mean is not None:
        out["difference"] = c.mean - b.mean
    if min(nb, nc) >= max(2, config.min_rows) and b.var is not None and c.var is not None:
        vb, vc = b.var / nb * b.fpc**2, c.var / nc * c.fpc**2
        se = math.sqrt(vb + vc)
        df = (vb + vc) ** 2 / ((vb**2 / (nb - 1) if vb else 0.0) + (vc**2 / (nc - 1) if vc else 0.0) or 1.0)
        out["low"], out["high"], out["p_value"] = _interval(out["difference"], se, df, config)
    return out


def _mean(values: np.ndarray) -> float | None:
    return float(np.mean(values)) if len(values) else None


def paired_share(b: np.ndarray, c: np.ndarray, config: CompareConfig) -> dict[str, Any]:
    """Shares over the threshold of paired rows, McNemar's exact test on the rows that changed side."""
    over_b, over_c = b > config.threshold, c > config.threshold
    n = len(b)
    only_b, only_c = int(np.sum(over_b & ~over_c)), int(np.sum(~over_b & over_c))
    out = _shares(over_b, over_c)
    out |= {"share_test": "McNemar exact", "share_p_value": mcnemar_exact_p(only_b, only_c) if n else None,
            "flipped_to_over": only_c, "flipped_to_under": only_b}
    if n >= config.min_rows:
        agree = float(np.mean(over_b == over_c))
        expected = float(np.mean(over_b) * np.mean(over_c) + np.mean(~over_b) * np.mean(~over_c))
        out["kappa"] = (agree - expected) / (1 - expected) if expected < 1 else 1.0
        spread = np.std(b) > 0 and np.std(c) > 0
        out["correlation"] = float(np.corrcoef(b, c)[0, 1]) if spread else None
    return out


def unpaired_share(b: np.ndarray, c: np.ndarray, config: CompareConfig) -> dict[str, Any]:
    return unpaired_share_of(int(np.sum(b > config.threshold)), len(b), int(np.sum(c > config.threshold)), len(c),
                             config)


def unpaired_share_of(over_b: int, n_b: int, over_c: int, n_c: int, config: CompareConfig) -> dict[str, Any]:
    """The shares over the threshold of two unpaired sides (``over`` of ``n`` each), a two-proportion z test."""
    share_b, share_c = (over_b / n_b if n_b else None), (over_c / n_c if n_c else None)
    out: dict[str, Any] = {"share_over_baseline": share_b, "share_over_candidate": share_c,
                           "share_difference": None if share_b is None or share_c is None else share_c - share_b,
                           "share_p_value": None, "kappa": None, "correlation": None, "share_test": "two-proportion z"}
    if min(n_b, n_c) >= config.min_rows:
        pooled = (over_b + over_c) / (n_b + n_c)
        se = math.sqrt(pooled * (1 - pooled) * (1 / n_b + 1 / n_c))
        diff = over_c / n_c - over_b / n_b
        out["share_p_value"] = normal_two_sided_p(diff / se) if se else (1.0 if diff == 0 else 0.0)
    return out


def _shares(over_b: np.ndarray, over_c: np.ndarray) -> dict[str, Any]:
    share_b = float(np.mean(over_b)) if len(over_b) else None
    share_c = float(np.mean(over_c)) if len(over_c) else None
    diff = None if share_b is None or share_c is None else share_c - share_b
    return {"share_over_baseline": share_b, "share_over_candidate": share_c, "share_difference": diff,
            "share_p_value": None, "kappa": None, "correlation": None}


def check_scales(baseline: pl.DataFrame, candidate: pl.DataFrame) -> None:
    """Refuses tables whose scores are on different scales (one reaches above 1, the other never does)."""
    tops = [float(f.select(pl.max_horizontal(pl.col(s).max() for s in SCORES)).item() or 0.0)
            for f in (baseline, candidate)]
    if (tops[0] > 1) != (tops[1] > 1):
        raise InputError(f"the tables' scores are on different scales (largest score {tops[0]:g} in the baseline, "
                         f"{tops[1]:g} in the candidate): score both with the same --scale")


def check_scored(frame: pl.DataFrame, name: str) -> None:
    missing = [c for c in (*SCORES, "status") if c not in frame.columns]
    if missing:
        raise InputError(f"the {name} table has no {', '.join(missing)} column(s): give scored tables (the output of "
                         "faithfulness-pipeline score, or a warehouse's scored_conversations)")
    for score in SCORES:
        if frame.schema[score] == pl.Null:  # every row failed: nothing to compare, nothing malformed
            continue
        if not frame.schema[score].is_numeric():
            raise InputError(f"the {name} table's {score} is {frame.schema[score]}, not a number: give scored tables")
        if not frame.schema[score].is_float():
            continue
        # one NaN turns every mean, interval and verdict into nan ("within noise"): refuse it by name instead
        bad = frame.filter(pl.col(score).is_nan() | pl.col(score).is_infinite())
        if bad.height:
            where = f" (e.g. {S.ROW_KEY} {bad.get_column(S.ROW_KEY)[0]!r})" if S.ROW_KEY in bad.columns else ""
            raise InputError(f"the {name} table's {score} holds {bad.height} value(s) that are not finite numbers "
                             f"(NaN or infinite){where}: scores are between 0 and the scale; score those rows again "
                             "or leave them out")


def _check_key(frame: pl.DataFrame, column: str, flag: str) -> None:
    """Refuses a column of lists or structs where rows are matched or grouped by value."""
    if frame.schema[column].is_nested():
        raise InputError(f"{flag} {column!r} is a column of {frame.schema[column]}: name a column of text, numbers "
                         "or dates")


def _paired_keys(baseline: pl.DataFrame, candidate: pl.DataFrame, key: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The two tables with their pairing column of one type: text in both when they differ (the same id read
    as integers from one file and as text from another is the same id)."""
    for frame in (baseline, candidate):
        _check_key(frame, key, "--pair-on")
    if baseline.schema[key] == candidate.schema[key]:
        return baseline, candidate
    return (baseline.with_columns(pl.col(key).cast(pl.String)), candidate.with_columns(pl.col(key).cast(pl.String)))


def _side(frame: pl.DataFrame, key: str, groups: Sequence[str], suffix: str) -> pl.DataFrame:
    keep = [c for c in (*SCORES, "status", "claims", "verdicts", *groups) if c in frame.columns and c != key]
    duplicated = frame.get_column(key).is_duplicated()
    if duplicated.any():
        example = frame.filter(duplicated).get_column(key).head(3).to_list()
        raise InputError(f"{key!r} repeats within a table (e.g. {example}), so rows cannot pair on it: pair on a "
                         "column that is unique per table with --pair-on COLUMN")
    return frame.select(key, *(pl.col(c).alias(c + suffix) for c in keep))


def _groups(frame: pl.DataFrame, columns: Sequence[str], suffix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [("all", None)]
    for column in columns:
        if column + suffix in frame.columns:
            values = frame.get_column(column + suffix).drop_nulls().unique().sort().to_list()
            out += [(column, v) for v in values]
    return out


def _where(frame: pl.DataFrame, column: str, value: Any, suffix: str = "") -> pl.DataFrame:
    return frame if column == "all" else frame.filter(pl.col(column + suffix) == value)


def _paired_rows(
    joined: pl.DataFrame, groups: Sequence[str], key: str, config: CompareConfig
) -> list[dict[str, Any]]:
    # Each group is a mask over the joined pairs, never a filtered copy of them: a month's pairs are held once,
    # and only the two score columns a figure needs are taken out of them.
    ok = (pl.col("status" + _B) == S.STATUS_OK) & (pl.col("status" + _C) == S.STATUS_OK)
    # sampled: rows in the sample of both tables (a row that failed to score was still drawn)
    unsampled = (pl.col("status" + _B) == S.STATUS_NOT_SAMPLED) | (pl.col("status" + _C) == S.STATUS_NOT_SAMPLED)
    rows = []
    for column, value in _groups(joined, groups, _B):
        where = pl.repeat(True, pl.len()) if column == "all" else (pl.col(column + _B) == value).fill_null(False)
        size, left_out = joined.select(where.sum().alias("size"), (where & unsampled).sum().alias("out")).row(0)
        fpc = correction(size, size - left_out)
        for score in SCORES:
            keep = where & ok & pl.col(score + _B).is_not_null() & pl.col(score + _C).is_not_null()
            pair = joined.select(pl.col(score + _B).filter(keep), pl.col(score + _C).filter(keep))
            b, c = pair.get_column(score + _B).to_numpy(), pair.get_column(score + _C).to_numpy()
            row = {"score": score.removesuffix("_score"), "group_by": column, "group": _text(value),
                   "pairing": f"paired on {key}"} | paired_score(b, c, fpc, config)
            if score == "hallucination_score":
                row |= paired_share(b, c, config)
            rows.append(row | {"verdict": verdict_of(len(b), row["low"], row["high"], config)})
    return rows


def _unpaired_rows(baseline: pl.DataFrame, candidate: pl.DataFrame, groups: Sequence[str],
                   config: CompareConfig) -> list[dict[str, Any]]:
    rows = []
    for column, value in _groups(pl.concat([baseline.select(g for g in groups if g in baseline.columns),
                                            candidate.select(g for g in groups if g in candidate.columns)],
                                           how="diagonal_relaxed"), groups):
        sides = [_where(f, column, value) if column == "all" or column in f.columns else f.clear()
                 for f in (baseline, candidate)]
        fpcs = [_fpc(f) for f in sides]
        for score in SCORES:
            b, c = (_judged(f).get_column(score).drop_nulls().to_numpy() for f in sides)
            row = {"score": score.removesuffix("_score"), "group_by": column, "group": _text(value),
                   "pairing": "unpaired"} | welch_score(b, c, fpcs[0], fpcs[1], config)
            if score == "hallucination_score":
                row |= unpaired_share(b, c, config)
            rows.append(row | {"verdict": verdict_of(min(len(b), len(c)), row["low"], row["high"], config)})
    return rows


def _text(value: Any) -> str:
    return "all" if value is None else str(value)


def _flips(joined: pl.DataFrame, key: str, config: CompareConfig) -> pl.DataFrame:
    h_b, h_c = pl.col("hallucination_score" + _B), pl.col("hallucination_score" + _C)
    crossed = joined.filter(h_b.is_not_null() & h_c.is_not_null()
                            & ((h_b > config.threshold) != (h_c > config.threshold)))
    return crossed.sort(pl.max_horizontal(h_b, h_c), h_c, descending=True).rename(
        {c: c.replace(_B, "_baseline_table").replace(_C, "_candidate_table") for c in crossed.columns if c != key})


def compare(baseline: pl.DataFrame, candidate: pl.DataFrame, *, pair_on: str | None = None,
            groups: Sequence[str] = ("language", "model"), config: CompareConfig | None = None) -> Comparison:
    """The comparison of two scored tables: paired on ``pair_on`` (refused when the tables share none of its
    values), else on the row key when they share any, else unpaired."""
    config = config or CompareConfig()
    check_scored(baseline, "baseline")
    check_scored(candidate, "candidate")
    check_scales(baseline, candidate)
    key = pair_on or S.ROW_KEY
    for name, frame in (("baseline", baseline), ("candidate", candidate)):
        if pair_on is not None and key not in frame.columns:
            raise InputError(f"the {name} table has no column {key!r} to pair on: name one both tables have")
    if key in baseline.columns and key in candidate.columns:
        baseline, candidate = _paired_keys(baseline, candidate, key)
    shared = key in baseline.columns and key in candidate.columns and not baseline.select(key).join(
        candidate.select(key), on=key, how="semi").is_empty()
    if not shared:
        if pair_on is not None:
            raise InputError(f"the tables share no value of {key!r}, so no row pairs: check the column, or leave out "
                             "--pair-on to compare them unpaired")
        table = pl.DataFrame(_unpaired_rows(baseline, candidate, groups, config), infer_schema_length=None)
        return Comparison(table, pl.DataFrame(), False, key, 0)
    joined = _side(baseline, key, groups, _B).join(_side(candidate, key, groups, _C), on=key, how="inner")
    table = pl.DataFrame(_paired_rows(joined, groups, key, config), infer_schema_length=None)
    return Comparison(table, _flips(joined, key, config), True, key, joined.height)


def compare_segments(frame: pl.DataFrame, by: str, *, baseline: str | None = None, pair_on: str | None = None,
                     groups: Sequence[str] = ("language",), config: CompareConfig | None = None) -> pl.DataFrame:
    """Each group of ``by`` in one scored table against the baseline group (``baseline``, else the first in
    sort order): one comparison table with a ``segment`` column."""
    if by not in frame.columns:
        raise InputError(f"no column {by!r} to compare the groups of: name one of {frame.columns}")
    _check_key(frame, by, "--by")
    values = frame.get_column(by).drop_nulls().cast(pl.String).unique().sort().to_list()
    if baseline is not None and baseline not in values:
        raise InputError(f"no {by} {baseline!r} in the table to compare against: it has {values}")
    base = baseline if baseline is not None else (values[0] if values else None)
    if base is None or len(values) < 2:
        raise InputError(f"column {by!r} has {len(values)} group(s): comparing needs two or more")
    parts = []
    as_text = pl.col(by).cast(pl.String)
    for value in values:
        if value == base:
            continue
        result = compare(frame.filter(as_text == base), frame.filter(as_text == value), pair_on=pair_on,
                         groups=[g for g in groups if g != by], config=config)
        parts.append(result.table.with_columns(pl.lit(f"{by}={value} vs {base}").alias("segment"),
                                               pl.lit(base).alias("baseline_group"),
                                               pl.lit(value).alias("candidate_group")))
    return pl.concat(parts, how="diagonal_relaxed")
