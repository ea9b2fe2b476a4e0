"""What a day's corrected figures read besides the day: people's labels (the ``answer_labels`` table) and the
scored answers of the label window's earlier days that they label, whose labels a group with too few of its own
may borrow. Only those answers are read of the earlier days, a few light columns each: a window of days never
passes through memory whole."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import date, timedelta

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.defs.names import LABELS, SCORED
from faithfulness_pipeline.defs.resources import LabelsResource
from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.outputs import OutputContext
from faithfulness_pipeline.outputs.corrected import CORRECTED_TABLE
from faithfulness_pipeline.outputs.kinds import DAY

log = logging.getLogger(__name__)


def with_labels(made: OutputContext, warehouse: WarehouseResource, labels: LabelsResource) -> OutputContext:
    """``made`` with the labels and the labelled answers of the window's earlier days (none without labels)."""
    made = replace(made, min_labels=labels.min_labels)
    if not warehouse.exists(LABELS, None):
        if labels.labels is not None:
            log.warning("FP_LABELS is set but answer_labels was never materialised: run the read_labels job (or "
                        "turn on the new_labels sensor); until then the corrected figures have no labels")
        return made
    table = warehouse.read(LABELS, None)
    if table.is_empty():
        return made
    assert made.day is not None
    return replace(made, labels=table, labelled_before=_before(warehouse, made, table, labels.label_window_days))


def _wanted(table: pl.DataFrame, made: OutputContext) -> pl.Expr | None:
    """Which scored answers the labels name: by row key, else by the id column."""
    for column in (S.ROW_KEY, made.key_column, made.id_column):
        if column and column in table.columns:
            values = table.get_column(column).cast(pl.String).drop_nulls().unique()
            return pl.col(column).cast(pl.String).is_in(values.implode())
    return None


def _before(warehouse: WarehouseResource, made: OutputContext, table: pl.DataFrame,
            window_days: int) -> pl.DataFrame | None:
    assert made.day is not None
    named = _wanted(table, made)
    if named is None:
        return None
    frames = []
    for back in range(1, window_days):
        day: date = made.day - timedelta(days=back)
        key = day.isoformat()
        if not warehouse.exists(SCORED, key):
            continue
        scan = warehouse.scan(SCORED, [key])
        present = scan.collect_schema().names()
        if named.meta.root_names()[0] not in present:
            continue
        rows = scan.select(CORRECTED_TABLE.reads(present, made)).filter(named).collect()
        frames.append(rows.with_columns(pl.lit(day, dtype=pl.Date).alias(DAY)))
    return pl.concat(frames, how="diagonal_relaxed").rename({DAY: "day"}) if frames else None
