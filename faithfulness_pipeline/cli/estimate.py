"""``faithfulness-pipeline estimate``: the figures of scored tables corrected by people's labels
(``core.corrected``): per group, the judge's raw figure beside the prediction-powered estimate and its interval."""

from __future__ import annotations

import os
import sys
from typing import Any

import click
import polars as pl

from faithfulness_pipeline.cli.options import resolved, setting_options
from faithfulness_pipeline.cli.streams import unfailing_streams
from faithfulness_pipeline.cli.warehouse import open_warehouse, scored_scan, warehouse_options
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.corrected import (
    FIGURES,
    FROM_NONE,
    FROM_POOL,
    EstimateConfig,
    estimate_groups,
    keyed_labels,
)
from faithfulness_pipeline.core.corrected import labelled_scores as join_labels
from faithfulness_pipeline.core.errors import FaithfulnessPipelineError, InputError
from faithfulness_pipeline.report.data import WarehouseTables
from faithfulness_pipeline.review.labels import read_labels
from faithfulness_pipeline.review.store import is_store
from faithfulness_pipeline.settings.derive import from_env
from faithfulness_pipeline.settings.labels import LabelSettings
from faithfulness_pipeline.settings.scoring import ScoringSettings
from faithfulness_pipeline.tables.command_outputs import check_command_outputs, write_frames
from faithfulness_pipeline.tables.inputs import resolve_inputs
from faithfulness_pipeline.tables.read import scan_input
from faithfulness_pipeline.traces.urls import scrubbed

#: What the estimate reads of a scored table besides the groups: the key, the status and the two scores.
_SCORED = (S.ROW_KEY, "status", "hallucination_score", "faithfulness_score")
_POOL = ("judge_model", "prompt_version", "language")


def _scored(specs: list[tuple[str, WarehouseTables | None]], by: list[str], id_columns: list[str]) -> pl.LazyFrame:
    """The light columns of every scored table (or warehouse, in its table format), lazily: the estimate folds
    them group by group with the streaming engine and collects only the labelled rows (a month of rows never
    sits in memory)."""
    frames = []
    for spec, warehouse in specs:
        scans = ([(f"{spec} ({warehouse.describe()})", scored_scan(spec, warehouse))] if warehouse is not None
                 else [(path, scan_input(path)) for path in resolve_inputs(spec)])
        for path, scan in scans:
            present = scan.collect_schema().names()
            missing = [c for c in _SCORED if c not in present]
            if missing:
                raise InputError(f"{path!r} is not a scored table: it lacks {missing} (score it with "
                                 "faithfulness-pipeline score first)")
            absent = [c for c in by if c not in present]
            if absent:
                raise InputError(f"--by names {absent}, which {path!r} lacks; it has {present[:16]}")
            wanted = dict.fromkeys([*_SCORED, *by, *_POOL, *id_columns])
            frames.append(scan.select([c for c in wanted if c in present]))
    return pl.concat(frames, how="diagonal_relaxed")


def _labels(specs: tuple[str, ...], scored: pl.LazyFrame, scoring: ScoringSettings) -> pl.DataFrame:
    """Every labelled table (or label store), its rows tied to the scored rows' ``row_key``
    (``core.corrected.keyed_labels``)."""
    return pl.concat([keyed_labels(read_labels(spec, scoring.columns().key_columns()), scored,
                                   id_column=scoring.id_column, turn_column=scoring.turn_column,
                                   key_column=scoring.key_column) for spec in specs], how="diagonal_relaxed")


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def render(table: pl.DataFrame, by: list[str]) -> str:
    """A few lines per group: each figure raw and corrected, with its interval and its labels."""
    lines = []
    for row in table.iter_rows(named=True):
        where = ", ".join(f"{c}={row[c]}" for c in by) or "all rows"
        source = {FROM_POOL: f"the judge's error from {row['pooled_labels']} pooled labels (same judge, prompt "
                             "and language): assumes it is the same on this group",
                  FROM_NONE: "too few labels to correct"}.get(row["labels_from"], "its own labels")
        lines.append(f"{where}: {row['answers']} answers, {row['labelled_answers']} labelled; {source}")
        for figure in FIGURES:
            corrected = (f"corrected {_num(row[f'{figure}_corrected'])} [{_num(row[f'{figure}_corrected_low'])}, "
                         f"{_num(row[f'{figure}_corrected_high'])}]" if row[f"{figure}_corrected"] is not None
                         else "corrected n/a: " + ("too few labels" if row["labels_from"] == FROM_NONE or
                                                   figure == FIGURES[0] else "too few label_faithfulness labels"))
            lines.append(f"  {figure:<22} judge {_num(row[figure])}  {corrected}")
    return "\n".join(lines)


@click.command()
@click.argument("scored_specs", nargs=-1, required=True, metavar="SCORED...")
@click.option("-o", "--output", default=None, help="Write the table of corrected figures (Parquet).")
@click.option("--by", default="model,language", show_default=True,
              help="Columns whose groups get figures of their own (comma-separated; empty: all rows).")
@click.option("--level", default=0.95, show_default=True, type=click.FloatRange(0.5, 0.999),
              help="Confidence level of the intervals.")
@setting_options(LabelSettings)
@warehouse_options
def estimate(scored_specs: tuple[str, ...], output: str | None, by: str, level: float, **options: Any) -> None:
    """The judge's figures of SCORED tables (or warehouses, in any table format: --table-format) corrected for
    its measured error by people's labels on a random sample of the rows (prediction-powered inference): per
    group, the share over the hallucination threshold and both mean scores, raw and corrected, with intervals.
    The threshold and scale are FP_HALLUCINATION_THRESHOLD's and FP_SCALE's."""
    with unfailing_streams():
        try:
            scoring = from_env(ScoringSettings, os.environ)
            settings = resolved(LabelSettings, options, os.environ)
            if settings.labels is None:
                raise InputError("estimate needs people's labels: give --labels PATH (or set FP_LABELS)")
            label_specs = (settings.labels,)
            columns = [c.strip() for c in by.split(",") if c.strip()]
            sides = [open_warehouse(spec, options, os.environ) for spec in scored_specs]
            files = [spec for spec, warehouse in sides if warehouse is None]
            check_command_outputs({"-o": output}, [s for s in (*files, *label_specs) if not is_store(s)])
            ids = [c for c in (scoring.id_column, scoring.turn_column, scoring.key_column) if c]
            scored = _scored(sides, columns, ids)
            config = EstimateConfig(threshold=scoring.hallucination_threshold, scale=scoring.scale, level=level,
                                    min_labels=settings.min_labels)
            values, count = join_labels(scored, _labels(label_specs, scored, scoring), config)
            table = estimate_groups(values, columns, config)
            write_frames({"-o": (output, table)})
        except FaithfulnessPipelineError as exc:
            click.echo(f"error: {scrubbed(str(exc))}", err=True)
            sys.exit(2)
        for line in count.lines():
            click.echo(line, err=True)
        click.echo(render(table, columns))
