"""Calibration: how far a judge agrees with people, measured on labelled rows (``core.labels``).

Polars in, polars out, no dagster and no litellm: the CLI's ``calibrate`` command and the Dagster asset
``judge_calibration`` both call ``core.labels.attach_labels`` then :func:`calibrate`. Grouping columns
(language, source, model) are reported on their own rows besides the overall row.

The judge's prediction is "hallucinated" when ``hallucination_score > threshold`` (the scoring setting
``hallucination_threshold``, in score units), the rule the BI aggregates use. Point estimates and the
bootstrap share one vectorised numpy definition of each statistic (:func:`_batch`, the point estimate being
the batch of one unresampled row); the tests hold it equal to scikit-learn's on every resample. scikit-learn
and scipy stay out of the import: together they cost about 2 s of CPU, more than the whole calibration of
the sample's labelled rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import numpy as np
import polars as pl
from numpy.typing import NDArray

from faithfulness_pipeline.core.labels import (
    JUDGE,
    LABEL_FAITHFULNESS,
    LABEL_VERDICT,
    binary_label,
    check_claim_labels,
    normalise_claim,
)

_Y = "__fp_label"


@dataclass(frozen=True, slots=True)
class CalibrationConfig:
    threshold: float = 0.5  # in score units: predicted hallucinated when the score is above it
    scale: float = 1.0
    group_columns: tuple[str, ...] = ()
    bootstrap: int = 1000
    seed: int = 0


# --- the statistics --------------------------------------------------------------------------------------


def _average_ranks(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """1-based ranks along each row of a 2-D array, tied values sharing the mean of their ranks."""
    rows, n = values.shape
    order = np.argsort(values, axis=1, kind="stable")
    ordered = np.take_along_axis(values, order, axis=1)
    position = np.broadcast_to(np.arange(n), (rows, n))
    starts = np.ones((rows, n), dtype=bool)  # where a run of equal values begins, in sorted order
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    ends = np.ones((rows, n), dtype=bool)
    ends[:, :-1] = starts[:, 1:]
    first = np.maximum.accumulate(np.where(starts, position, 0), axis=1)
    last = np.minimum.accumulate(np.where(ends, position, n - 1)[:, ::-1], axis=1)[:, ::-1]
    ranks = np.empty((rows, n))
    np.put_along_axis(ranks, order, (first + last) / 2 + 1, axis=1)
    return ranks


def _kappa(tp: NDArray[np.float64], fp: NDArray[np.float64], fn: NDArray[np.float64],
           tn: NDArray[np.float64]) -> NDArray[np.float64]:
    """Cohen's kappa from the four cells of 2 x 2 tables: the agreement beyond what the two sides' own shares
    of each class would give by chance; NaN where chance alone agrees on every row (one class on both sides)."""
    n = tp + fp + fn + tn
    with np.errstate(divide="ignore", invalid="ignore"):
        observed = (tp + tn) / n
        expected = ((tp + fp) * (tp + fn) + (tn + fn) * (tn + fp)) / (n * n)
        return np.where(expected < 1, (observed - expected) / (1 - expected), np.nan)


def cohen_kappa(first: NDArray[np.bool_], second: NDArray[np.bool_]) -> float | None:
    """Cohen's kappa of two raters' yes/no labels of the same items (in the same order); None where it is
    undefined (no item, or both raters gave one and the same class to every item). Symmetric in the raters."""
    if not first.size:
        return None
    both, neither = np.array([float((first & second).sum())]), np.array([float((~first & ~second).sum())])
    second_only, first_only = np.array([float((~first & second).sum())]), np.array([float((first & ~second).sum())])
    value = float(_kappa(both, second_only, first_only, neither)[0])
    return value if np.isfinite(value) else None


def _batch(y: NDArray[np.bool_], pred: NDArray[np.bool_], score: NDArray[np.float64]) -> dict[str, NDArray[np.float64]]:
    """Balanced accuracy, Cohen's kappa, F1 and ROC-AUC of every row of 2-D arrays (one resample a row), by
    the definitions scikit-learn uses; NaN where a resample lacks a class."""
    tp = (y & pred).sum(1).astype(float)
    fn = (y & ~pred).sum(1).astype(float)
    fp = (~y & pred).sum(1).astype(float)
    tn = (~y & ~pred).sum(1).astype(float)
    pos, neg = tp + fn, tn + fp
    with np.errstate(divide="ignore", invalid="ignore"):
        ba = np.where((pos > 0) & (neg > 0), (tp / pos + tn / neg) / 2, np.nan)
        kappa = np.where((pos > 0) & (neg > 0), _kappa(tp, fp, fn, tn), np.nan)
        f1 = np.where(2 * tp + fp + fn > 0, 2 * tp / (2 * tp + fp + fn), 0.0)
        ranks = _average_ranks(score)  # ties get their average rank, as the Mann-Whitney form of AUC needs
        auc = np.where((pos > 0) & (neg > 0), ((ranks * y).sum(1) - pos * (pos + 1) / 2) / (pos * neg), np.nan)
    return {"balanced_accuracy": ba, "kappa": kappa, "f1": f1, "roc_auc_hallucination": auc}


def _point(y: NDArray[np.bool_], pred: NDArray[np.bool_], score: NDArray[np.float64]) -> dict[str, float]:
    """The statistics of :func:`_batch` on the rows as they are (NaN where a class is missing)."""
    return {name: float(values[0]) for name, values in _batch(y[None, :], pred[None, :], score[None, :]).items()}


def best_threshold(y: NDArray[np.bool_], score: NDArray[np.float64]) -> tuple[float | None, float | None]:
    """The threshold t among the distinct scores whose rule ``score > t`` has the highest balanced accuracy
    (the lowest such t), with that accuracy; (None, None) when a class is missing."""
    if y.all() or not y.any():
        return None, None
    candidates = np.unique(score)
    preds = score[None, :] > candidates[:, None]
    ba = _batch(np.broadcast_to(y, preds.shape), preds, np.broadcast_to(score, preds.shape))["balanced_accuracy"]
    best = int(np.nanargmax(ba))
    return float(candidates[best]), float(ba[best])


def _interval(values: NDArray[np.float64]) -> tuple[float | None, float | None]:
    finite = values[np.isfinite(values)]
    # An interval from a handful of usable resamples would look precise and be noise.
    if finite.size < max(20, values.size // 2):
        return None, None
    low, high = np.percentile(finite, [2.5, 97.5])
    return float(low), float(high)


def _opt(value: float) -> float | None:
    return None if value is None or not np.isfinite(value) else float(value)


def _metrics(group: pl.DataFrame, config: CalibrationConfig, rng: np.random.Generator) -> dict[str, object]:
    scored = group.filter(pl.col("hallucination_score").is_not_null() & pl.col(_Y).is_not_null())
    out: dict[str, object] = {
        "rows": group.height,
        "unlabelled": group.filter(pl.col(_Y).is_null()).height,
        "unscored": group.filter(pl.col(_Y).is_not_null() & pl.col("hallucination_score").is_null()).height,
        "n": scored.height,
    }
    y = scored.get_column(_Y).to_numpy().astype(bool)
    h = scored.get_column("hallucination_score").cast(pl.Float64).to_numpy()
    f = scored.get_column("faithfulness_score").cast(pl.Float64).fill_null(0.0).to_numpy() / config.scale
    pred = h > config.threshold
    both = bool(y.any() and not y.all())
    out["hallucinated"] = int(y.sum())
    if scored.height:
        tp, fn = int((y & pred).sum()), int((y & ~pred).sum())
        fp, tn = int((~y & pred).sum()), int((~y & ~pred).sum())
        point = _point(y, pred, h)
        out.update(tp=tp, fp=fp, fn=fn, tn=tn, precision=tp / (tp + fp) if tp + fp else 0.0,
                   recall=tp / (tp + fn) if tp + fn else 0.0, f1=point["f1"])
    if both:
        out["balanced_accuracy"] = point["balanced_accuracy"]
        out["kappa"] = _opt(point["kappa"])
        out["roc_auc_hallucination"] = point["roc_auc_hallucination"]
        # low faithfulness should mean hallucinated
        out["roc_auc_faithfulness"] = _point(y, pred, -f)["roc_auc_hallucination"]
        t, ba = best_threshold(y, h)
        out.update(best_threshold=t, best_balanced_accuracy=ba)
    if LABEL_FAITHFULNESS in scored.columns:
        graded = scored.filter(pl.col(LABEL_FAITHFULNESS).is_not_null())
        if graded.height:
            truth = graded.get_column(LABEL_FAITHFULNESS).cast(pl.Float64).to_numpy()
            judged = graded.get_column("faithfulness_score").cast(pl.Float64).fill_null(0.0).to_numpy() / config.scale
            out["faithfulness_mae"] = float(np.abs(judged - truth).mean())
            out["faithfulness_labelled"] = graded.height
    if config.bootstrap and scored.height:
        for name, values in _bootstrap(y, pred, h, config.bootstrap, rng).items():
            out[f"{name}_low"], out[f"{name}_high"] = _interval(values) if both else (None, None)
    return out


_CELLS_PER_BATCH: Final = 2_000_000  # resamples x rows held at once: bounded memory on large labelled sets


def _bootstrap(y: NDArray[np.bool_], pred: NDArray[np.bool_], score: NDArray[np.float64], resamples: int,
               rng: np.random.Generator) -> dict[str, NDArray[np.float64]]:
    n = y.size
    step = max(1, _CELLS_PER_BATCH // n)
    parts: list[dict[str, NDArray[np.float64]]] = []
    for start in range(0, resamples, step):
        idx = rng.integers(0, n, size=(min(step, resamples - start), n))
        parts.append(_batch(y[idx], pred[idx], score[idx]))
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


#: The calibration table: one row per judge x group, in this column order.
CALIBRATION_SCHEMA: Final[dict[str, pl.DataType]] = {
    JUDGE: pl.String(), "judge_model": pl.String(), "prompt_version": pl.String(),
    "group_by": pl.String(), "group": pl.String(),
    "rows": pl.Int64(), "unlabelled": pl.Int64(), "unscored": pl.Int64(), "n": pl.Int64(), "hallucinated": pl.Int64(),
    "threshold": pl.Float64(),
    "balanced_accuracy": pl.Float64(), "balanced_accuracy_low": pl.Float64(), "balanced_accuracy_high": pl.Float64(),
    "kappa": pl.Float64(), "kappa_low": pl.Float64(), "kappa_high": pl.Float64(),
    "precision": pl.Float64(), "recall": pl.Float64(), "f1": pl.Float64(), "f1_low": pl.Float64(),
    "f1_high": pl.Float64(),
    "roc_auc_hallucination": pl.Float64(), "roc_auc_hallucination_low": pl.Float64(),
    "roc_auc_hallucination_high": pl.Float64(), "roc_auc_faithfulness": pl.Float64(),
    "tp": pl.Int64(), "fp": pl.Int64(), "fn": pl.Int64(), "tn": pl.Int64(),
    "best_threshold": pl.Float64(), "best_balanced_accuracy": pl.Float64(),
    "faithfulness_labelled": pl.Int64(), "faithfulness_mae": pl.Float64(),
    "claims_labelled": pl.Int64(), "claims_matched": pl.Int64(), "claim_verdict_accuracy": pl.Float64(),
    "claim_balanced_accuracy": pl.Float64(),
    "bootstrap": pl.Int64(), "bootstrap_seed": pl.Int64(), "calibrated_at": pl.Datetime("us", "UTC"),
}


def _claim_verdicts(rows: pl.DataFrame, labels: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Each labelled claim of ``rows`` with the verdict the judge gave the claim of the same (normalised)
    text in the same row; null where the judge extracted no such claim."""
    judged = (
        rows.select(*[pl.col(k).cast(pl.String) for k in keys], pl.col("verdicts"))
        .explode("verdicts")
        .drop_nulls("verdicts")
        .select(*keys, normalise_claim(pl.col("verdicts").struct.field("claim")).alias("__fp_claim"),
                pl.col("verdicts").struct.field("verdict").alias("__fp_verdict"))
        .unique([*keys, "__fp_claim"], keep="first", maintain_order=True)
    )
    mine = labels.join(rows.select(*[pl.col(k).cast(pl.String) for k in keys]), on=keys, how="semi")
    return mine.join(judged, on=[*keys, "__fp_claim"], how="left")


def _claim_metrics(claims: pl.DataFrame) -> dict[str, object]:
    matched = claims.filter(pl.col("__fp_verdict").is_not_null())
    out: dict[str, object] = {"claims_labelled": claims.height, "claims_matched": matched.height}
    if matched.height:
        truth = matched.get_column(LABEL_VERDICT).to_numpy()
        given = matched.get_column("__fp_verdict").to_numpy()
        out["claim_verdict_accuracy"] = float((truth == given).mean())
        bad_truth, bad_given = truth != "supported", given != "supported"
        if bad_truth.any() and not bad_truth.all():
            no_score = np.zeros(bad_truth.size)
            out["claim_balanced_accuracy"] = _point(bad_truth, bad_given, no_score)["balanced_accuracy"]
    return out


def calibrate(joined: pl.DataFrame, config: CalibrationConfig, claim_labels: pl.DataFrame | None = None,
              keys: Sequence[str] = ()) -> pl.DataFrame:
    """The calibration table of a joined table (:func:`attach_labels`; several judges' rows may be stacked,
    told apart by the ``judge`` column): per judge x prompt version, overall, then per value of each
    grouping column. Grouping columns the table lacks are skipped (see :func:`missing_groups`).

    With ``claim_labels`` (the row ``keys``, ``claim``, ``label_verdict``) each labelled claim is matched to
    the judge's claim of the same text in that row: how many matched, and on those the share of equal
    verdicts and the balanced accuracy of "not supported"."""
    claims = check_claim_labels(claim_labels, keys) if claim_labels is not None else None
    frame = joined.with_columns(binary_label(joined).alias(_Y))
    if JUDGE not in frame.columns:
        frame = frame.with_columns(pl.col("judge_model").alias(JUDGE))
    groups = [c for c in config.group_columns if c in frame.columns]
    now = datetime.now(UTC)
    records: list[dict[str, object]] = []
    identities = frame.select(JUDGE, "judge_model", "prompt_version").unique(maintain_order=True)
    for judge, model, prompt in identities.iter_rows():
        mine = frame.filter(
            (pl.col(JUDGE) == judge)
            & pl.col("judge_model").eq_missing(model)
            & pl.col("prompt_version").eq_missing(prompt)
        )
        # One generator per judge, seeded alike: judges of one table are resampled on the same rows.
        rng = np.random.default_rng(config.seed)
        parts: list[tuple[str, str, pl.DataFrame]] = [("all", "all", mine)]
        for column in groups:
            values = mine.with_columns(pl.col(column).cast(pl.String).fill_null("(null)").alias("__fp_group"))
            for value in sorted(values.get_column("__fp_group").unique().to_list()):
                parts.append((column, value, values.filter(pl.col("__fp_group") == value)))
        for group_by, value, part in parts:
            record: dict[str, object] = {
                JUDGE: judge, "judge_model": model, "prompt_version": prompt, "group_by": group_by, "group": value,
                "threshold": config.threshold, "bootstrap": config.bootstrap, "bootstrap_seed": config.seed,
                "calibrated_at": now,
            }
            record.update(_metrics(part, config, rng))
            if claims is not None:
                record.update(_claim_metrics(_claim_verdicts(part, claims, list(keys))))
            records.append(record)
    return pl.DataFrame(records, schema=CALIBRATION_SCHEMA)


def missing_groups(frame: pl.DataFrame, config: CalibrationConfig) -> list[str]:
    return [c for c in config.group_columns if c not in frame.columns]


def disagreements(joined: pl.DataFrame, keys: Sequence[str], config: CalibrationConfig) -> pl.DataFrame:
    """The labelled rows on which the judges of a stacked table predict differently: one row per such row and
    judge, with the label, that judge's score and prediction and whether it matched the label."""
    frame = joined.with_columns(
        binary_label(joined).alias("label"),
        (pl.col("hallucination_score") > config.threshold).alias("predicted_hallucinated"),
    )
    if JUDGE not in frame.columns:
        frame = frame.with_columns(pl.col("judge_model").alias(JUDGE))
    keys = list(keys)
    split = (
        frame.group_by(keys)
        .agg(pl.col("predicted_hallucinated").n_unique().alias("__fp_views"), pl.len().alias("__fp_judges"))
        .filter((pl.col("__fp_views") > 1) & (pl.col("__fp_judges") > 1))
        .select(keys)
    )
    return (
        frame.join(split, on=keys, how="semi")
        .select(
            *keys, JUDGE, "label", "predicted_hallucinated",
            (pl.col("predicted_hallucinated") == pl.col("label")).alias("agrees_with_label"),
            "hallucination_score", "faithfulness_score",
            *[c for c in ("hallucination_reason",) if c in frame.columns],
        )
        .sort([*keys, JUDGE])
    )


def paired_differences(joined: pl.DataFrame, keys: Sequence[str], config: CalibrationConfig) -> pl.DataFrame:
    """Balanced accuracy of each judge minus the first judge's, on the labelled rows both scored, with a
    paired bootstrap interval (the same resampled rows for both judges): whether a difference is more than
    the luck of the labelled sample."""
    frame = joined.with_columns(binary_label(joined).alias(_Y))
    if JUDGE not in frame.columns:
        frame = frame.with_columns(pl.col("judge_model").alias(JUDGE))
    keys = list(keys)
    judges = frame.get_column(JUDGE).unique(maintain_order=True).to_list()
    records: list[dict[str, object]] = []
    for other in judges[1:]:
        pair = [
            frame.filter((pl.col(JUDGE) == j) & pl.col(_Y).is_not_null() & pl.col("hallucination_score").is_not_null())
            .select(*keys, pl.col(_Y), (pl.col("hallucination_score") > config.threshold).alias(f"__fp_p{i}"))
            for i, j in enumerate((judges[0], other))
        ]
        both = pair[0].join(pair[1].drop(_Y), on=keys, how="inner").sort(keys)
        record: dict[str, object] = {"judge": other, "reference": judges[0], "n": both.height}
        y = both.get_column(_Y).to_numpy().astype(bool)
        if y.any() and not y.all():
            p0, p1 = (both.get_column(f"__fp_p{i}").to_numpy().astype(bool) for i in (0, 1))
            no_score = np.zeros(y.size)
            record["balanced_accuracy_difference"] = (
                _point(y, p1, no_score)["balanced_accuracy"] - _point(y, p0, no_score)["balanced_accuracy"])
            if config.bootstrap:
                rng = np.random.default_rng(config.seed)
                idx = rng.integers(0, y.size, size=(config.bootstrap, y.size))
                scores = np.zeros(idx.shape)  # AUC is not compared here; the batch needs a score
                diff = (_batch(y[idx], p1[idx], scores)["balanced_accuracy"]
                        - _batch(y[idx], p0[idx], scores)["balanced_accuracy"])
                record["low"], record["high"] = _interval(diff)
        records.append(record)
    return pl.DataFrame(records, schema={"judge": pl.String, "reference": pl.String, "n": pl.Int64,
                                         "balanced_accuracy_difference": pl.Float64, "low": pl.Float64,
                                         "high": pl.Float64})


# --- what people read ------------------------------------------------------------------------------------


def _num(value: object, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _with_interval(row: dict[str, object], name: str) -> str:
    low, high = row.get(f"{name}_low"), row.get(f"{name}_high")
    if low is None or high is None:
        return _num(row.get(name))
    return f"{_num(row.get(name))} [{_num(low)}, {_num(high)}]"


def calibration_markdown(table: pl.DataFrame) -> str:
    """The calibration table as markdown: agreement with 95 % bootstrap intervals, confusion and best threshold."""
    if table.is_empty():
        return "_no labelled rows_"
    lines = [
        "| judge | prompt | group | n | hallucinated | balanced accuracy | Cohen's κ | precision | recall "
        "| F1 | ROC-AUC (hallucination) | ROC-AUC (faithfulness) | tp / fp / fn / tn | best t (BA) |",
        "|---|---|---|---:|---:|---|---|---:|---:|---|---|---:|---|---|",
    ]
    for row in table.iter_rows(named=True):
        group = "**all**" if row["group_by"] == "all" else f"{row['group_by']}={row['group']}".replace("|", "\\|")
        confusion = "-" if row["tp"] is None else f"{row['tp']} / {row['fp']} / {row['fn']} / {row['tn']}"
        best = "-" if row["best_threshold"] is None else (
            f"{row['best_threshold']:g} ({_num(row['best_balanced_accuracy'])})"
        )
        cells = [
            str(row[JUDGE]).replace("|", "\\|"), str(row["prompt_version"]).replace("|", "\\|"), group,
            str(row["n"]), str(row["hallucinated"]), _with_interval(row, "balanced_accuracy"),
            _with_interval(row, "kappa"), _num(row["precision"]), _num(row["recall"]), _with_interval(row, "f1"),
            _with_interval(row, "roc_auc_hallucination"), _num(row["roc_auc_faithfulness"]), confusion, best,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    first = table.row(0, named=True)
    for row in table.filter((pl.col("group_by") == "all") & pl.col("claims_labelled").is_not_null()).iter_rows(
            named=True):
        lines.append("")
        lines.append(
            f"Claims of {row[JUDGE]}: {row['claims_matched']} of {row['claims_labelled']} labelled claims found "
            f"among the judge's claims; on those, equal verdicts {_num(row['claim_verdict_accuracy'])}, balanced "
            f"accuracy of 'not supported' {_num(row['claim_balanced_accuracy'])}."
        )
    lines.append("")
    lines.append(
        f"Predicted hallucinated when hallucination_score > {first['threshold']:g}; intervals: 95 % percentile "
        f"bootstrap, {first['bootstrap']} resamples, seed {first['bootstrap_seed']}."
    )
    return "\n".join(lines)


def overall(table: pl.DataFrame) -> pl.DataFrame:
    """The overall row of every judge."""
    return table.filter(pl.col("group_by") == "all")


def below_floor(table: pl.DataFrame, floor: float) -> list[str]:
    """One line per judge whose overall balanced accuracy is below ``floor`` (or cannot be measured)."""
    problems = []
    for row in overall(table).iter_rows(named=True):
        ba = row["balanced_accuracy"]
        if ba is None:
            problems.append(f"{row[JUDGE]}: balanced accuracy cannot be measured on {row['n']} labelled row(s) "
                            f"({row['hallucinated']} hallucinated): both classes are needed")
        elif ba < floor:
            problems.append(f"{row[JUDGE]}: balanced accuracy {_with_interval(row, 'balanced_accuracy')} is below "
                            f"the floor {floor:g}")
    return problems

