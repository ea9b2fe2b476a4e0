"""The answer-quality report: one self-contained HTML file with charts, for people rather than BI tools.

``build_report_to(source, target)`` reads a warehouse or a scored table (local or in an object store) a
chunk at a time, in memory that does not grow with its rows, and writes the page (to a local path or a
URI); ``build_report`` is the same for a local target, returning its path. The CLI's ``report`` command
and the Dagster asset ``answer_quality_report`` call them. No dagster, no
litellm, no judge here (import-linter checks it): callers say which judge names are the offline baseline.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import replace
from pathlib import Path

from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.report.data import (
    Listed,
    WarehouseTables,
    is_warehouse,
    load_calibration,
    load_corrected,
    rows_of,
    scored_chunks,
)
from faithfulness_pipeline.report.render import Headline, headline, render_html, write_report
from faithfulness_pipeline.report.summary import ReportData, summarise, summarise_chunks
from faithfulness_pipeline.settings.derive import settings as registered
from faithfulness_pipeline.settings.scoring import ScoringSettings
from faithfulness_pipeline.tables.storage import Place, is_remote

_DEFAULT_SCORING = ScoringSettings()


def build_report_to(
    source: str,
    target: str | os.PathLike[str] | Place,
    *,
    baseline_judges: frozenset[str] = frozenset(),
    calibration: str | None = None,
    timestamp_column: str = "created_at",
    timestamp_required: bool = False,
    timezone: str = "UTC",
    scoring: ScoringSettings = _DEFAULT_SCORING,
    worst: int = 20,
    listed: Listed | None = None,
    tables: WarehouseTables | None = None,
) -> tuple[Place, ReportData]:
    """Write the report of ``source`` (a warehouse folder, or a scored Parquet file / folder / glob; local or
    a URI) to ``target`` (a local path or a URI). ``scoring`` names the table's model, answer and question
    columns, the hallucination threshold and the scale, as they were when the table was scored. ``listed``: the
    warehouse's data files by table, where its table format lists them (``report.data.Listed``). ``tables``: ``source``
    is a warehouse read through its table format (``report.data.WarehouseTables``), in any format."""
    chunks = scored_chunks(source, timestamp_column=timestamp_column, timestamp_required=timestamp_required,
                           timezone=timezone,
                           columns=(scoring.model_column, "language"), answer_column=scoring.output_column,
                           listed=listed, warehouse=tables)
    first = next(chunks)
    if scoring.model_column != _DEFAULT_SCORING.model_column and scoring.model_column not in first.columns:
        # A column named on purpose that is not there: the report would draw every row as one unnamed model.
        flag = next(s.flag for s in registered(ScoringSettings) if s.name == "model_column")
        raise InputError(f"{source!r} has no column {scoring.model_column!r} ({flag}): name one of its columns, "
                         f"or leave {flag} out for {_DEFAULT_SCORING.model_column!r}")
    warehouse = None if tables is not None else (
        Place.of(source) if listed is not None or is_warehouse(source) else None)
    data = summarise_chunks(itertools.chain([first], chunks), source=source, scoring=scoring, worst=worst,
                            calibration=load_calibration(calibration, warehouse, listed, tables),
                            full_rows=lambda keys, columns: rows_of(source, keys, columns, listed, tables))
    data = replace(data, corrected=load_corrected(warehouse, listed, tables))
    return write_report(data, target, baseline_judges=baseline_judges), data


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
    """:func:`build_report_to` for a local ``target``, returning its path (an object-store target: call
    ``build_report_to``, which returns its place)."""
    if is_remote(target):
        raise ValueError(f"{os.fspath(target)} is in an object store: build_report_to writes the report there")
    place, data = build_report_to(source, target, baseline_judges=baseline_judges, calibration=calibration,
                                  timestamp_column=timestamp_column, timezone=timezone, scoring=scoring, worst=worst)
    return place.local_path(), data


__all__ = ["Headline", "ReportData", "WarehouseTables", "build_report", "build_report_to", "headline", "render_html",
           "summarise", "write_report"]
