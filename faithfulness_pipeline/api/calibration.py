"""``faithfulness-pipeline calibrate``: the labelled rows, scored here or taken from scored tables, measured.

With no scored table the labelled rows are scored by the judge the settings name (the same flags and
variables as ``score``). With one or more scored tables (``--scored``, repeatable) their rows of the
labelled keys are compared with the labels; two or more are compared with each other too: one
calibration table holds every judge, and the rows where the judges' predictions differ are listed.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.calibration import (
    CalibrationConfig,
    below_floor,
    calibrate,
    calibration_markdown,
    disagreements,
    missing_groups,
    paired_differences,
)
from faithfulness_pipeline.core.errors import ConfigError, InputError
from faithfulness_pipeline.core.labels import (
    JUDGE,
    LABEL_COLUMNS,
    attach_labels,
    check_labels,
    key_columns,
)
from faithfulness_pipeline.judging.catalog import note_on
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.settings.calibration import CalibrationSettings
from faithfulness_pipeline.settings.derive import from_env, settings
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.settings.scoring import ScoringSettings
from faithfulness_pipeline.tables.read import read_all

_SHOWN_DISAGREEMENTS = 10
_SCORED_COLUMNS = ("hallucination_score", "faithfulness_score", "status", "judge_model", "prompt_version")


def calibration_settings(options: Mapping[str, Any], env: Mapping[str, str]) -> CalibrationSettings:
    """The calibration settings of a run: the flags given, then the ``FP_CALIBRATION_*`` variables, then the
    defaults; the labelled rows must be named."""
    given = {s.name: options[s.name] for s in settings(CalibrationSettings) if options.get(s.name) is not None}
    chosen = from_env(CalibrationSettings, env, given)
    if not chosen.labelled:
        raise ConfigError("calibrate needs labelled rows: give --labelled PATH (or set FP_CALIBRATION_LABELLED)")
    return chosen


def read_claim_labels(calibration: CalibrationSettings) -> pl.DataFrame | None:
    return read_table(calibration.claim_labelled) if calibration.claim_labelled else None


def read_table(spec: str, text: frozenset[str] = frozenset()) -> pl.DataFrame:
    """Every row of a Parquet file, folder or glob (files must share one schema); ``text`` names CSV
    columns read as text (the row key's)."""
    return read_all(spec, text)


@dataclass(frozen=True)
class CalibrationRun:
    table: pl.DataFrame  # the calibration table (core.calibration.CALIBRATION_SCHEMA)
    disagreements: pl.DataFrame  # rows where judges predict differently (empty with one judge)
    differences: pl.DataFrame  # each judge's balanced accuracy minus the first judge's, paired bootstrap
    keys: list[str]
    judges: list[str]
    skipped_groups: list[str]
    labelled_rows: int
    judge_notes: dict[str, str]  # judge → what a reader of its scores must know (a baseline judge's caveat)
    floor: float
    problems: list[str]  # judges below the agreement floor


def _names(scored: list[tuple[str, pl.DataFrame]]) -> list[str]:
    """A judge's name is its model (and prompt version where two share a model); the table's path where two
    tables have the same judge (two settings of one model)."""
    identities = [
        " + ".join(sorted({f"{m} ({p})" for m, p in frame.select("judge_model", "prompt_version").unique().rows()}))
        for _, frame in scored
    ]
    models = [" + ".join(sorted(set(frame.get_column("judge_model").drop_nulls().to_list()))) for _, frame in scored]
    if len(set(models)) == len(models):
        return models
    if len(set(identities)) == len(identities):
        return identities
    return [path for path, _ in scored]


def _has_keys(labelled: pl.DataFrame, scoring: ScoringSettings) -> bool:
    wanted = scoring.key_column or scoring.id_column
    return S.ROW_KEY in labelled.columns or wanted in labelled.columns


def run(
    labelled: pl.DataFrame,
    scored: list[tuple[str, pl.DataFrame]],
    scoring: ScoringSettings,
    calibration: CalibrationSettings,
    judge: JudgeSettings | None = None,
    claim_labels: pl.DataFrame | None = None,
) -> CalibrationRun:
    """Calibrate the judges of ``scored`` (name, table) against ``labelled`` (and per-claim labels, when
    given); with no scored table, score the labelled rows with ``judge`` first."""
    check_labels(labelled)
    for name, frame in scored:
        missing = [c for c in _SCORED_COLUMNS if c not in frame.columns]
        if missing:
            raise InputError(f"{name} is not a scored table (it lacks {missing}): give the output of "
                             f"`faithfulness-pipeline score` or a scored_conversations table")
    if not scored:
        made = make_judge(judge or JudgeSettings())
        rows = score_frame(labelled, made, scoring.config())
        scored = [(made.model_name, rows)]
        if not _has_keys(labelled, scoring):
            # Scored here, every row carries its own labels: the scorer's row key (a content hash when the
            # rows have no id) ties them.
            labelled = rows.select(S.ROW_KEY, *[c for c in LABEL_COLUMNS if c in rows.columns])
    keys = key_columns(labelled, scored[0][1], id_column=scoring.id_column, turn_column=scoring.turn_column,
                       key_column=scoring.key_column)
    names = _names(scored)
    joined = pl.concat(
        [attach_labels(frame, labelled, keys).with_columns(pl.lit(name, dtype=pl.String).alias(JUDGE))
         for name, (_, frame) in zip(names, scored, strict=True)],
        how="diagonal_relaxed",
    )
    config = CalibrationConfig(
        threshold=scoring.hallucination_threshold, scale=scoring.scale, group_columns=calibration.groups(),
        bootstrap=calibration.bootstrap, seed=calibration.bootstrap_seed,
    )
    differences = paired_differences(joined, keys, config)
    # One table holds every judge: its overall rows also carry the difference to the first judge.
    table = calibrate(joined, config, claim_labels, keys).join(
        differences.select(
            "judge", pl.lit("all").alias("group_by"),
            pl.col("balanced_accuracy_difference").alias("balanced_accuracy_vs_first"),
            pl.col("low").alias("balanced_accuracy_vs_first_low"),
            pl.col("high").alias("balanced_accuracy_vs_first_high"),
        ),
        on=["judge", "group_by"], how="left", maintain_order="left",
    )
    noted = {n: note for n, m in joined.select(JUDGE, "judge_model").unique().rows() if (note := note_on(m))}
    return CalibrationRun(
        table=table,
        disagreements=disagreements(joined, keys, config) if len(names) > 1 else joined.clear().select(keys),
        differences=differences,
        keys=keys,
        judges=names,
        skipped_groups=missing_groups(joined, config),
        labelled_rows=joined.select(keys).n_unique(),
        judge_notes=dict(sorted(noted.items())),
        floor=calibration.agreement_floor,
        problems=below_floor(table, calibration.agreement_floor),
    )


#: Characters a line of prose in ``calibrate``'s output holds at most.
_PROSE_WIDTH = 100


def report(result: CalibrationRun) -> str:
    """What ``calibrate`` prints: the calibration table, the judges' disagreements and the floor."""
    lines = [f"calibration on {result.labelled_rows} labelled rows (key {', '.join(result.keys)}), "
             f"judges: {', '.join(result.judges)}", "", calibration_markdown(result.table)]
    if result.skipped_groups:
        lines.append(f"grouping columns not in the labelled rows (skipped): {', '.join(result.skipped_groups)}")
    if len(result.judges) > 1:
        rows = result.disagreements.select(result.keys).unique().height
        lines.append("")
        for d in result.differences.iter_rows(named=True):
            diff = d["balanced_accuracy_difference"]
            interval = "" if d["low"] is None else f" [{d['low']:+.3f}, {d['high']:+.3f}] (paired bootstrap)"
            diff_text = "not measurable" if diff is None else f"{diff:+.3f}"
            lines.append(f"balanced accuracy of {d['judge']} minus {d['reference']}: {diff_text}{interval} on "
                         f"{d['n']} rows both scored")
        lines += [f"the judges disagree on {rows} of {result.labelled_rows} labelled rows"]
        if rows:
            right = (
                result.disagreements.filter(pl.col("agrees_with_label"))
                .group_by(JUDGE).len().sort(JUDGE).rows()
            )
            lines.append("  right on those rows: " + ", ".join(f"{j} {n}" for j, n in right) if right else
                         "  right on those rows: none of the judges")
            shown = result.disagreements.select(result.keys).unique(maintain_order=True).head(_SHOWN_DISAGREEMENTS)
            for key in shown.rows():
                mine = result.disagreements.join(
                    pl.DataFrame([key], schema=result.keys, orient="row"), on=result.keys, how="semi"
                )
                views = ", ".join(
                    f"{j}: {'hallucinated' if p else 'faithful'} ({s:g})" if s is not None else f"{j}: no score"
                    for j, p, s in mine.select(JUDGE, "predicted_hallucinated", "hallucination_score").rows()
                )
                label = mine.get_column("label").item(0)
                lines.append(f"  {' / '.join(str(k) for k in key)}: label {'hallucinated' if label else 'faithful'}"
                             f"; {views}")
    for name, note in result.judge_notes.items():
        # prose, wrapped for a terminal (the table above is markdown, to be pasted as it is)
        lines += ["", textwrap.fill(f"note: {name}: {note}", _PROSE_WIDTH, subsequent_indent="  ",
                                    break_on_hyphens=False, break_long_words=False)]
    lines += [""] + ([f"below the agreement floor: {p}" for p in result.problems] or
                     [f"every judge is at or above the agreement floor {result.floor:g}"])
    return "\n".join(lines)
