"""The answer-quality report: one self-contained HTML file with charts, for people rather than BI tools.

``build_report(source, target)`` reads a warehouse or a scored table and writes the page; the CLI's
``report`` command and the Dagster asset ``answer_quality_report`` both call it. No dagster, no litellm,
no judge here (import-linter checks it): callers say which judge names are the offline baseline.
"""

from __future__ import annotations

import os
from pathlib import Path

from faithfulness_pipeline.report.data import ReportData, is_warehouse, load_calibration, load_scored, summarise
from faithfulness_pipeline.report.render import Headline, headline, render_html, write_report
from faithfulness_pipeline.settings.scoring import ScoringSettings

_DEFAULT_SCORING = ScoringSettings()


def build_report(
    source: str,
    target: str | os.PathLike[str],
    *,
    baseline_judges: frozenset[str] = frozenset(),
    calibration: str | None = None,
    timestamp_column: str = "created_at",
    timezone: str = "UTC",
    scoring: ScoringSettings = _DEFAULT_SCORING,
    worst: int = 20,
) -> tuple[Path, ReportData]:
    """Write the report of ``source`` (a warehouse folder, or a scored Parquet file / folder / glob).
    ``scoring`` names the table's model, answer and question columns, the hallucination threshold and the
    scale, as they were when the table was scored."""
    scored = load_scored(source, timestamp_column=timestamp_column, timezone=timezone,
                         columns=(scoring.model_column, scoring.output_column, scoring.input_column, "language"))
    warehouse = Path(source) if is_warehouse(Path(source)) else None
    data = summarise(scored, source=source, scoring=scoring, worst=worst,
                     calibration=load_calibration(calibration, warehouse))
    return write_report(data, target, baseline_judges=baseline_judges), data


__all__ = ["Headline", "ReportData", "build_report", "headline", "render_html", "summarise", "write_report"]
