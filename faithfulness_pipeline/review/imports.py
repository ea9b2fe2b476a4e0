"""Labels made elsewhere into the label store (``review import``): a table of labels (a spreadsheet's export:
Parquet, JSON Lines or CSV) with the answers' row keys, or the id and turn columns the scorer keys rows by, and
``label_hallucinated`` and/or ``label_faithfulness``; optionally ``reviewer``, ``labelled_at`` and
``inclusion_probability``.

Each label is tied to its scored answer, whose lineage (scoring run, judge, prompt version) and content hash it
records as a label of the page does. A label that names no scored answer is not stored: it is counted and
named, never dropped without a word.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.corrected import INCLUSION, REVIEWER
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.core.labels import LABEL_FAITHFULNESS, LABEL_HALLUCINATED, check_labels, key_columns
from faithfulness_pipeline.review.items import read_items
from faithfulness_pipeline.review.session import checked_reviewer
from faithfulness_pipeline.review.store import Label
from faithfulness_pipeline.settings.scoring import ScoringSettings
from faithfulness_pipeline.tables.inputs import resolve_inputs
from faithfulness_pipeline.tables.read import file_schema, read_columns

LABELLED_AT: Final = "labelled_at"
_EXAMPLES: Final = 5


@dataclass(frozen=True, slots=True)
class Imported:
    """The labels to store, the keys of the labels that name no scored answer (as the table gave them), and
    the rows that hold no label (neither column filled in)."""

    labels: list[Label]
    unmatched: list[str]
    blank: int


def scored_keys(specs: Sequence[str], ids: Sequence[str]) -> pl.DataFrame:
    """The row key and id columns of every scored answer (their texts stay on disk)."""
    frames = []
    for spec in specs:
        for path in resolve_inputs(spec):
            present = file_schema(path, frozenset({S.ROW_KEY, *ids})).names()
            if S.ROW_KEY not in present:
                raise InputError(f"{path!r} has no {S.ROW_KEY!r} column: give scored tables (`faithfulness-pipeline "
                                 "score`'s output)")
            frames.append(read_columns(path, [c for c in dict.fromkeys([S.ROW_KEY, *ids]) if c in present],
                                       frozenset({S.ROW_KEY, *ids})).with_columns(pl.all().cast(pl.String)))
    return pl.concat(frames, how="diagonal_relaxed")


def _keyed(table: pl.DataFrame, scored: pl.DataFrame, scoring: ScoringSettings) -> pl.Series:
    """Each label's row key: its own, or the scored answer's found by the id and turn columns (a label matching
    none keeps its key columns joined by ``#``, to be named)."""
    keys = key_columns(table, scored, id_column=scoring.id_column, turn_column=scoring.turn_column,
                       key_column=scoring.key_column)
    if keys == [S.ROW_KEY]:
        return table.get_column(S.ROW_KEY).cast(pl.String)
    index = scored.select(*keys, S.ROW_KEY).unique(keys, keep="first")
    own = pl.concat_str([pl.col(k) for k in keys], separator="#")
    found = (table.select(pl.col(k).cast(pl.String) for k in keys).with_row_index("__fp_row")
             .join(index, on=keys, how="left").sort("__fp_row"))
    return found.select(pl.col(S.ROW_KEY).fill_null(own)).to_series()


def _times(table: pl.DataFrame) -> list[datetime]:
    """Each label's time: the table's ``labelled_at`` (a datetime, naive read as UTC, or ISO-8601 text), else now."""
    now = datetime.now(UTC)
    if LABELLED_AT not in table.columns:
        return [now] * table.height
    out = []
    for value in table.get_column(LABELLED_AT).to_list():
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                raise InputError(f"{LABELLED_AT!r} holds {value!r}, which is no ISO-8601 time") from None
        if value is None:
            out.append(now)
        elif isinstance(value, datetime):
            out.append(value if value.tzinfo else value.replace(tzinfo=UTC))
        else:
            raise InputError(f"{LABELLED_AT!r} must be a time (or ISO-8601 text); it holds {type(value).__name__}")
    return out


def _reviewers(table: pl.DataFrame, reviewer: str | None) -> list[str]:
    given = table.get_column(REVIEWER).cast(pl.String).to_list() if REVIEWER in table.columns else [None] * table.height
    if reviewer is None and any(name is None for name in given):
        raise InputError(f"{sum(n is None for n in given)} label(s) name no reviewer: add a {REVIEWER!r} column, or "
                         "give --reviewer NAME for the labels without one")
    return [checked_reviewer(name if name is not None else reviewer) for name in given]


def imported_labels(table: pl.DataFrame, scored: Sequence[str], raw: Sequence[str],
                    scoring: ScoringSettings, reviewer: str | None = None) -> Imported:
    """The labels of ``table`` (see the module) tied to the answers of the ``scored`` tables, each with its
    reviewer (the table's ``reviewer``, else ``reviewer``)."""
    check_labels(table)
    ids = [c for c in (scoring.id_column, scoring.turn_column, scoring.key_column) if c]
    index = scored_keys(scored, ids)
    keys = _keyed(table, index, scoring).to_list()
    names = _reviewers(table, reviewer)
    pairs = list(zip(keys, names, strict=True))
    twice = sorted({p for p in pairs if pairs.count(p) > 1})
    if twice:
        raise InputError(f"{len(twice)} answer(s) have two labels of one reviewer, e.g. {twice[:_EXAMPLES]}: keep one "
                         "label per answer and reviewer")
    known = set(index.get_column(S.ROW_KEY).to_list())
    matched = sorted({k for k in keys if k in known})
    wanted = pl.DataFrame({S.ROW_KEY: matched}, schema={S.ROW_KEY: pl.String})
    items = {item.row_key: item for item in read_items(wanted, scored, raw, scoring)} if matched else {}

    def column(name: str) -> list[Any]:
        return table.get_column(name).to_list() if name in table.columns else [None] * table.height

    hallucinated, faithfulness, probability = column(LABEL_HALLUCINATED), column(LABEL_FAITHFULNESS), column(INCLUSION)
    labels, unmatched, blank = [], [], 0
    for row, (key, name, when) in enumerate(zip(keys, names, _times(table), strict=True)):
        item = items.get(key)
        if item is None:
            unmatched.append(key)
            continue
        if hallucinated[row] is None and faithfulness[row] is None:
            blank += 1
            continue
        labels.append(Label(
            row_key=key, reviewer=name, label_hallucinated=hallucinated[row],
            label_faithfulness=None if faithfulness[row] is None else float(faithfulness[row]), labelled_at=when,
            content_hash=item.content_hash, scoring_run_id=item.scoring_run_id, judge_model=item.judge_model,
            prompt_version=item.prompt_version,
            inclusion_probability=None if probability[row] is None else float(probability[row]), source="import",
        ))
    return Imported(labels, unmatched, blank)
