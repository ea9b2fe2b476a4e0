"""The corrected figures of a day: per day x model x language, the judge's share over the threshold and both mean
scores beside their prediction-powered estimates from people's labels (``core.corrected``, docs/corrected.md).
The command line's way to them is the ``estimate`` command."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.corrected import (
    FIGURES,
    EstimateConfig,
    estimate_groups,
    keyed_labels,
    labelled_scores,
    window_agreement,
)
from faithfulness_pipeline.outputs.kinds import DAY, DayTable, OutputContext

#: The group columns of the table, after ``day``.
_GROUPS: Final = ("model", "language")

_FIGURE_TEXT: Final = {
    "over_threshold_share": "share of answers over the hallucination threshold",
    "hallucination_mean": "mean hallucination score",
    "faithfulness_mean": "mean faithfulness score",
}


def _columns() -> Mapping[str, str]:
    described = {
        "day": "The day (DATE) in the pipeline's time zone.",
        "model": "The model that wrote the answers (null when the table has no model column).",
        "language": "The answers' language (null when the table has no language column).",
        "answers": "Answers the judge scored (status ok with a score): the rows each figure is about.",
        "labelled_answers": "Of them, answers people labelled (several reviewers of one answer count once, as the "
        "mean of their labels).",
        "labels_from": "group: the group's own labels correct it; pooled: it had too few, and borrows the judge's "
        "error from the labels of the same judge model, prompt version and language over the label window "
        "(assuming that error is the same here); none: too few anywhere, no corrected figure.",
        "pooled_labels": "Labelled answers borrowed from the pool (0 unless labels_from is pooled).",
        "window_agreement_p": "p-value of a test that the judge errs alike on this group's labelled answers and on "
        "the other labelled answers of its pool (the label window): small (the labels_agree_with_the_window check "
        "warns below 0.01) means the pool's labels describe another judge error than the day's. Null with fewer "
        "than 2 labelled answers a side.",
    }
    for figure, text in _FIGURE_TEXT.items():
        described[figure] = f"The judge's {text} (its own figure, not corrected)."
        described[f"{figure}_corrected"] = (f"The {text} corrected by people's labels: a prediction-powered estimate "
                                            "(PPI++), unbiased when the labelled answers were drawn at random.")
        described[f"{figure}_corrected_low"] = "Lower bound of its 95 % interval."
        described[f"{figure}_corrected_high"] = "Upper bound of its 95 % interval."
    return MappingProxyType(described)


COLUMNS: Final = _columns()


def _reads(present: list[str], context: OutputContext) -> list[str]:
    wanted = (S.ROW_KEY, "status", "hallucination_score", "faithfulness_score", context.model_column, "language",
              "judge_model", "prompt_version", context.id_column, context.turn_column, *([context.key_column]
                                                                             if context.key_column else []))
    return [c for c in dict.fromkeys(wanted) if c in present]


def _uniform(rows: pl.DataFrame, context: OutputContext) -> pl.DataFrame:
    """The group columns under the table's names (a table without one has a null one)."""
    named = rows.rename({context.model_column: "model"}) if context.model_column in rows.columns and \
        context.model_column != "model" else rows
    return named.with_columns(pl.lit(None, dtype=pl.String).alias(c) for c in _GROUPS if c not in named.columns)


def _build(rows: pl.DataFrame, context: OutputContext) -> pl.DataFrame:
    """Each day's groups among ``rows`` (its day in :data:`DAY`), corrected by the labels of the context, a group
    with too few borrowing from the labelled answers of its pool (the day's and the days' before)."""
    config = EstimateConfig(threshold=context.hallucination_threshold, scale=context.scale,
                            min_labels=context.min_labels)
    rows = _uniform(rows, context).rename({DAY: "day"})
    if context.labels is None or context.labels.is_empty():
        nothing = pl.DataFrame(schema={S.ROW_KEY: pl.String, "label_hallucinated": pl.Boolean})
        values, _ = labelled_scores(rows, nothing, config)
        return _shaped(estimate_groups(values, ["day", *_GROUPS], config))
    before = context.labelled_before
    known = rows if before is None else pl.concat([rows, _uniform(before, context)], how="diagonal_relaxed")
    labels = keyed_labels(context.labels, known, id_column=context.id_column, turn_column=context.turn_column,
                          key_column=context.key_column)
    values, _ = labelled_scores(rows, labels, config)
    pool = values if before is None else pl.concat(
        [values, labelled_scores(_uniform(before, context), labels, config)[0]], how="diagonal_relaxed")
    by = ["day", *_GROUPS]
    table = estimate_groups(values, by, config, pool=pool)
    return _shaped(table.join(window_agreement(values, pool, by, config), on=by, how="left", nulls_equal=True))


def _schema(context: OutputContext | None = None) -> pl.Schema:
    columns: dict[str, pl.DataType] = {"day": pl.Date(), "model": pl.String(), "language": pl.String(),
                                       "answers": pl.Int64(), "labelled_answers": pl.Int64(),
                                       "labels_from": pl.String(), "pooled_labels": pl.Int64(),
                                       "window_agreement_p": pl.Float64()}
    for figure in FIGURES:
        columns.update({figure: pl.Float64(), f"{figure}_corrected": pl.Float64(),
                        f"{figure}_corrected_low": pl.Float64(), f"{figure}_corrected_high": pl.Float64()})
    return pl.Schema(columns)


def _shaped(table: pl.DataFrame) -> pl.DataFrame:
    return table.select(pl.col(n).cast(t) if n in table.columns else pl.lit(None, dtype=t).alias(n)
                        for n, t in _schema().items())


def _preview(table: pl.DataFrame) -> str:
    """The day's groups: the judge's share over the threshold and the corrected one."""
    if table.is_empty():
        return "_no rows_"
    lines = ["| model | language | labelled | judge's share | corrected | 95 % interval | labels |",
             "|---|---|---:|---:|---:|---|---|"]
    for r in table.iter_rows(named=True):
        corrected = r["over_threshold_share_corrected"]
        interval = "-" if corrected is None else (f"[{r['over_threshold_share_corrected_low']:.3f}, "
                                                  f"{r['over_threshold_share_corrected_high']:.3f}]")
        judge = "-" if r["over_threshold_share"] is None else f"{r['over_threshold_share']:.3f}"
        lines.append(f"| {r['model'] or '-'} | {r['language'] or '-'} | {r['labelled_answers']} | {judge} | "
                     f"{'-' if corrected is None else f'{corrected:.3f}'} | {interval} | {r['labels_from']} |")
    return "\n".join(lines)


CORRECTED_TABLE: Final = DayTable(
    name="daily_corrected_quality",
    description="One row per day x model x language: the judge's share over the hallucination threshold and mean "
    "scores beside the same figures corrected by people's labels on a random sample (prediction-powered "
    "estimates with 95 % intervals), how many answers were labelled and where the labels came from "
    "(docs/corrected.md). The command line's way to it is faithfulness-pipeline estimate.",
    columns=COLUMNS,
    kinds=frozenset({"polars"}),
    revision="corrected-1",
    checks=("labels_cover_the_groups", "labels_agree_with_the_window"),
    day_in_rows=True,
    reads=_reads,
    build=_build,
    schema=_schema,
    preview=_preview,
    labelled=True,
)
