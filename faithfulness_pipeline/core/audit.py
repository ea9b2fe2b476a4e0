"""The audit sample: a random, stratified sample of the judged rows for people to label, so that every rate the
judge publishes can be corrected for the judge's own measured error.

Each row's audit point is the first 8 bytes of BLAKE2b over a salt of the audit's own and the row key, read as
a number in [0, 1), as the judging sample's point is made (``core.sampling``) but with another salt. So:

- the sample is independent of the judging sample, and of everything the judge said: a row's point depends
  on its key alone, never on its scores, verdicts or status;
- the same rows are drawn on every run, in any order, chunking or process;
- a stratum takes its ``n_h`` rows with the smallest points: a simple random sample without replacement of
  its eligible rows, so each of them is in with probability ``n_h / N_h`` (recorded on each row), and a
  larger sample holds every row of a smaller one (``core.allocation`` shares rows out so that no stratum's
  share shrinks when N grows).

The point is drawn from the row key itself, also for rows made of spans (where the judging sample draws from
the trace id, to keep a trace whole): two answers of one trace in one stratum would otherwise share a point,
enter the sample together, and their probability would no longer be ``n_h / N_h``.

Strata are the values of a few columns (the day, the answering model and the answer's language); a null, or
a column the rows lack, is a value of its own. Only rows the judge scored (status ``ok``) are eligible: rows
with status ``error``, ``not_sampled`` or ``skipped`` have no score to correct, are never drawn, and are
counted per stratum in the plan. Rows outside the judging sample are not eligible, so the probability
recorded is that of an audit among the judged rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.allocation import MINIMUM_PER_STRATUM, allocate
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.core.sampling import hashed_points

#: Changing the salt draws a new, independent audit; it is part of what the audit sample means.
AUDIT_SALT: Final = b"fp-audit-v1\x00"

STRATUM: Final = "stratum"
STRATUM_ROWS: Final = "stratum_rows"
STRATUM_SAMPLE: Final = "stratum_sample"
INCLUSION_PROBABILITY: Final = "inclusion_probability"
AUDIT_POINT: Final = "audit_point"
#: The plan's counts of a stratum's rows by what the judge did with them.
ROWS: Final = "rows"
NOT_ELIGIBLE: Final = {"error": S.STATUS_ERROR, "not_sampled": S.STATUS_NOT_SAMPLED, "skipped": S.STATUS_SKIPPED}

_REQUIRED: Final = (S.ROW_KEY, "status")


def audit_points(keys: pl.Series, salt: bytes = AUDIT_SALT) -> pl.Series:
    """Each row key's audit point in [0, 1)."""
    return hashed_points(keys, salt, AUDIT_POINT)


@dataclass(frozen=True, slots=True)
class AuditPlan:
    """How many rows each stratum gives: one row per stratum (its label, its values, its rows by status, its
    eligible rows ``stratum_rows``, its sample ``stratum_sample`` and their ratio ``inclusion_probability``,
    null without eligible rows), in label order."""

    strata: pl.DataFrame
    size: int
    minimum: int

    @property
    def eligible(self) -> int:
        return int(self.strata.get_column(STRATUM_ROWS).sum())

    @property
    def drawn(self) -> int:
        return int(self.strata.get_column(STRATUM_SAMPLE).sum())

    def short_of_minimum(self) -> pl.DataFrame:
        """The strata with eligible rows that got fewer than the minimum (or than all they have): only when
        ``size`` could not give every stratum its minimum."""
        floor = pl.min_horizontal(pl.lit(self.minimum), pl.col(STRATUM_ROWS))
        return self.strata.filter(pl.col(STRATUM_SAMPLE) < floor)


@dataclass(frozen=True, slots=True)
class AuditSample:
    """The drawn rows (every column they came with, then the stratum's fields and the audit point), by stratum
    and audit point, and the plan they were drawn by."""

    rows: pl.DataFrame
    plan: AuditPlan


def _checked(rows: pl.DataFrame) -> None:
    missing = [c for c in _REQUIRED if c not in rows.columns]
    if missing:
        raise InputError(f"the rows have no column {', '.join(missing)} (columns: {', '.join(rows.columns)}): an "
                         f"audit sample is drawn from a scored table, the output of `faithfulness-pipeline score`")
    twice = rows.get_column(S.ROW_KEY).filter(rows.get_column(S.ROW_KEY).is_duplicated()).unique().sort()
    if twice.len():
        shown = ", ".join(repr(k) for k in twice.head(3).to_list())
        raise InputError(f"{twice.len()} row key(s) appear more than once ({shown}): an answer is drawn once, so give "
                         f"each answer's scoring once (the latest, by scored_at)")


def _valued(rows: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    """``rows`` with every stratum column (a column they lack: null, one value)."""
    return rows.with_columns(pl.lit(None, dtype=pl.String).alias(c) for c in by if c not in rows.columns)


def _label(values: tuple[object, ...]) -> str:
    """A stratum's name: its values as a JSON list (``["2026-11-24", "gpt-4o", "en"]``), which no two strata
    share, a null included."""
    return json.dumps([None if v is None else str(v) for v in values], ensure_ascii=False)


def _counted(rows: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    """One row per stratum: its label, its values, its rows, its eligible rows and the others by status."""
    status = pl.col("status")
    counts = rows.group_by(list(by)).agg(
        pl.len().cast(pl.Int64).alias(ROWS),
        (status == S.STATUS_OK).sum().cast(pl.Int64).alias(STRATUM_ROWS),
        *((status == value).sum().cast(pl.Int64).alias(name) for name, value in NOT_ELIGIBLE.items()),
    )
    labels = pl.Series(STRATUM, [_label(v) for v in counts.select(by).iter_rows()], dtype=pl.String)
    return counts.with_columns(labels).sort(STRATUM).select(STRATUM, *by, ROWS, STRATUM_ROWS, *NOT_ELIGIBLE)


def audit_plan(rows: pl.DataFrame, size: int, by: Sequence[str] = ("day", "model", "language"),
               minimum: int = MINIMUM_PER_STRATUM, per_stratum: Callable[[int], int] | None = None) -> AuditPlan:
    """How ``size`` rows are shared out over the strata of ``rows`` (the columns ``by``; the row key and status
    are read), from their counts alone: nothing is hashed. ``per_stratum``: instead, each stratum's sample from
    its eligible rows (what an interval of a given width needs there: ``core.ppi.labels_needed``), and ``size``
    their sum."""
    _checked(rows)
    counts = _counted(_valued(rows, by), by)
    eligible = counts.get_column(STRATUM_ROWS).to_list()
    if per_stratum is not None:
        sizes = tuple(min(max(per_stratum(n), 0), n) for n in eligible)
        size = sum(sizes)
    else:
        sizes = allocate(eligible, size, minimum)
    strata = counts.with_columns(pl.Series(STRATUM_SAMPLE, sizes, dtype=pl.Int64)).with_columns(
        pl.when(pl.col(STRATUM_ROWS) > 0).then(pl.col(STRATUM_SAMPLE) / pl.col(STRATUM_ROWS))
        .otherwise(None).alias(INCLUSION_PROBABILITY))
    return AuditPlan(strata, size, minimum)


def draw_audit(rows: pl.DataFrame, size: int, by: Sequence[str] = ("day", "model", "language"),
               minimum: int = MINIMUM_PER_STRATUM, salt: bytes = AUDIT_SALT,
               per_stratum: Callable[[int], int] | None = None) -> AuditSample:
    """The audit sample of ``size`` rows in all from ``rows`` (a scored table's row key, status and the stratum
    columns ``by``, and whatever else should stay with a drawn row), stratified by ``by`` (``per_stratum``: as
    for :func:`audit_plan`)."""
    plan = audit_plan(rows, size, by, minimum, per_stratum)
    eligible = _valued(rows, by).filter(pl.col("status") == S.STATUS_OK)
    eligible = eligible.with_columns(audit_points(eligible.get_column(S.ROW_KEY), salt))
    fields = plan.strata.select(*by, STRATUM, STRATUM_ROWS, STRATUM_SAMPLE, INCLUSION_PROBABILITY)
    # Ties of two points (a 64-bit collision) go to the smaller row key: the order stays a function of the keys.
    drawn = (eligible.join(fields, on=list(by), how="inner", nulls_equal=True)
             .sort(STRATUM, AUDIT_POINT, S.ROW_KEY)
             .filter(pl.int_range(pl.len()).over(STRATUM) < pl.col(STRATUM_SAMPLE)))
    order = [c for c in drawn.columns if c not in (STRATUM, STRATUM_ROWS, STRATUM_SAMPLE, INCLUSION_PROBABILITY,
                                                   AUDIT_POINT)]
    return AuditSample(drawn.select(*order, STRATUM, STRATUM_ROWS, STRATUM_SAMPLE, INCLUSION_PROBABILITY,
                                    AUDIT_POINT), plan)
