"""The report as one self-contained HTML file: inline CSS and SVG, no script, no font, no request.

Every value from the data (answers, questions, claims, reasons, passages, model and language names, the
calibration table) goes through Jinja2's autoescaping; only the SVG that ``charts`` drew is inserted as
markup, and matplotlib escapes the strings it writes there. A Content-Security-Policy that allows no
script and no request is the backstop.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from typing import Any, Final

import jinja2
import polars as pl
from markupsafe import Markup

from faithfulness_pipeline.core.money import usd
from faithfulness_pipeline.report import charts
from faithfulness_pipeline.report.summary import ReportData
from faithfulness_pipeline.tables.output_files import OutputError
from faithfulness_pipeline.tables.storage import Place, describe

#: Longest text (answer, question, claim, reason, passage) shown in full; longer ones are cut.
TEXT_LIMIT = 1200
#: Calibration rows shown at most.
CALIBRATION_ROWS = 60
#: The calibration table's columns the page shows, in this order (each with its 95 % interval where the table
#: has one); the others (confusion counts, thresholds, claim-level measures, bootstrap settings) stay in the
#: table, which the section names.
CALIBRATION_SHOWN: Final = ("judge", "prompt_version", "group_by", "group", "n", "hallucinated", "balanced_accuracy",
                            "kappa", "precision", "recall", "f1", "roc_auc_hallucination")

_DAILY = (
    ("answers", "answers"),
    ("judged (sample)", "sampled_answers"),
    ("error rows", "error_answers"),
    ("hallucination mean", "hallucination_mean"),
    ("hallucination p90", "hallucination_p90"),
    ("share over threshold", "over_threshold_share"),
    ("faithfulness mean", "faithfulness_mean"),
    ("billed cost (USD)", "billed_cost_usd"),
)


@dataclass(frozen=True)
class Headline:
    """The numbers at the top of the report (also the Dagster preview)."""

    period: str
    answers: int
    error_answers: int
    hallucination_mean: float | None
    faithfulness_mean: float | None
    over_threshold_share: float | None
    billed_cost_usd: float | None
    judges: str
    sampled_answers: int | None = None  # the answers judged, when a sample (not every answer) was
    undated_answers: int = 0  # answers whose time column is empty: a row of their own, named UNDATED

    def items(self, threshold: float) -> list[tuple[str, str]]:
        judged = [] if self.sampled_answers is None else [("judged (sample)", str(self.sampled_answers))]
        undated = [(f"{UNDATED} (no date)", str(self.undated_answers))] if self.undated_answers else []
        return [
            ("answers", str(self.answers)),
            *judged,
            *undated,
            ("error rows", str(self.error_answers)),
            ("mean hallucination", num(self.hallucination_mean)),
            (f"over {threshold:g}", pct(self.over_threshold_share)),
            ("mean faithfulness", num(self.faithfulness_mean)),
            ("billed cost", "unknown" if self.billed_cost_usd is None else usd(self.billed_cost_usd)),
        ]


#: The day shown for answers whose time column is empty (a null would read "None").
UNDATED = "undated"


def num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}".rstrip("0").rstrip(".") if value == value else "–"
    return str(value)


def pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _cell(row: dict[str, Any], column: str) -> str:
    """A daily table cell; a mean or share over a sample gets its 95 % interval (a census's has no width)."""
    show = pct if column == "over_threshold_share" else lambda v: num(v, 6 if "cost" in column else 3)
    text = show(row[column])
    low, high = row.get(f"{column}_low"), row.get(f"{column}_high")
    if low is not None and high is not None and low != high:
        text += f" ({show(low)} – {show(high)})"
    return text


def _cut(text: Any) -> str:
    value = "" if text is None else str(text)
    return value if len(value) <= TEXT_LIMIT else value[: TEXT_LIMIT - 1] + "…"


def headline(data: ReportData) -> Headline:
    daily = data.daily
    days = sorted(d for d in daily.get_column("day").to_list() if d is not None)
    period = f"{days[0]} .. {days[-1]}" if len(days) > 1 else (str(days[0]) if days else "no days")
    billed = daily.get_column("billed_cost_usd")
    over = int(daily.get_column("over_threshold_answers").sum() or 0)
    scored = {score: (int(part.get_column("answers").sum()),
                      float((part.get_column("value") * part.get_column("answers")).sum()))
              for score in ("hallucination", "faithfulness")
              for part in [data.distribution.filter(pl.col("score") == score)]}
    with_score = scored["hallucination"][0]
    answers = int(daily.get_column("answers").sum() or 0)
    sampled = int(daily.get_column("sampled_answers").sum() or 0)
    undated = int(daily.filter(pl.col("day").is_null()).get_column("answers").sum() or 0)
    return Headline(
        period=period,
        answers=answers,
        error_answers=int(daily.get_column("error_answers").sum() or 0),
        hallucination_mean=scored["hallucination"][1] / with_score if with_score else None,
        faithfulness_mean=scored["faithfulness"][1] / scored["faithfulness"][0] if scored["faithfulness"][0] else None,
        over_threshold_share=over / with_score if with_score else None,
        billed_cost_usd=None if billed.null_count() else float(billed.sum() or 0.0),
        judges=", ".join(f"{m} ({p})" for m, p, _ in data.judges),
        sampled_answers=sampled if sampled < answers else None,
        undated_answers=undated,
    )


def _calibration(data: ReportData) -> dict[str, Any] | None:
    """The calibration table as the page shows it: the headline measures of the calibrate command's table,
    each with its interval, the rest left to the table itself (it has some 45 columns); a table of another
    shape (no judge, group_by, group and balanced_accuracy) as it is."""
    table = data.calibration
    if table is None:
        return None
    ours = {"judge", "group_by", "group", "balanced_accuracy"} <= set(table.columns)
    shown = [c for c in CALIBRATION_SHOWN if c in table.columns] if ours else table.columns
    intervals = {f"{c}_{end}" for c in shown for end in ("low", "high")}
    left = [c for c in table.columns if c not in shown and c not in intervals]
    rows = [[_cell(row, c) for c in shown] for row in table.head(CALIBRATION_ROWS).iter_rows(named=True)]
    return {"columns": [c.replace("_", " ") for c in shown], "rows": rows, "left": len(left)}


def _corrected(data: ReportData) -> list[dict[str, Any]] | None:
    """The corrected share of each group beside the judge's, as the page shows it."""
    table = data.corrected
    if table is None:
        return None
    return [{"day": r["day"], "model": r["model"] or "-", "language": r["language"] or "-",
             "labelled": r["labelled_answers"], "judge": pct(r["over_threshold_share"]),
             "corrected": pct(r["over_threshold_share_corrected"]),
             "interval": f"{pct(r['over_threshold_share_corrected_low'])} - "
                         f"{pct(r['over_threshold_share_corrected_high'])}",
             "labels_from": r["labels_from"]} for r in table.iter_rows(named=True)]


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("faithfulness_pipeline.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )


def render_html(data: ReportData, *, baseline_judges: frozenset[str] = frozenset(),
                generated: dt.datetime | None = None) -> str:
    """The report page. ``baseline_judges``: judge model names that get the offline-baseline warning."""
    top = headline(data)
    daily_rows = [
        {
            "day": row["day"] if row["day"] is not None else UNDATED,
            "model": row["model"] if row["model"] is not None else "(no model)",
            "cells": [_cell(row, c) for _, c in _DAILY],
        }
        for row in data.daily.iter_rows(named=True)
    ]
    figures = {
        "trend": charts.trend_chart(data.daily, data.threshold, data.scale),
        "distribution": charts.distribution_chart(data.distribution, data.scale),
        "verdicts": charts.verdict_mix_chart(data.verdict_mix),
        "claims": charts.claims_chart(data.claims_per_answer),
    }
    when = generated or dt.datetime.now(dt.UTC)
    return _environment().get_template("report.html.j2").render(
        period=top.period,
        scored_rows=data.scored_rows,
        source=data.source,
        generated=when.strftime("%Y-%m-%d %H:%M UTC"),
        judges=data.judges,
        baseline=sorted({m for m, _, _ in data.judges} & baseline_judges),
        warnings=data.warnings,
        headline=top.items(data.threshold),
        charts={name: Markup(svg) for name, svg in figures.items()},  # drawn here; matplotlib escaped its text
        daily_labels=[label for label, _ in _DAILY],
        daily=daily_rows,
        worst=[row | {"day": row["day"] if row.get("day") is not None else UNDATED} for row in data.worst],
        cut=TEXT_LIMIT,
        cut_text=_cut,
        num=num,
        calibration=_calibration(data),
        corrected=_corrected(data),
        comparisons=data.comparisons,
    )


def write_report(data: ReportData, target: str | os.PathLike[str] | Place, **kwargs: Any) -> Place:
    """Render and write the page atomically (a reader never sees half a file), to a local path or an
    object-store URI; returns where it is."""
    page = render_html(data, **kwargs)
    place = Place.of(target)
    try:
        place.write_text(page)
    except OSError as exc:  # a full disk, a size limit, a bucket gone: name the page, not only the errno
        raise OutputError(f"cannot write the report {place.uri!r}: {describe(exc)}; nothing was written (free "
                          "space, or write elsewhere)") from None
    return place
