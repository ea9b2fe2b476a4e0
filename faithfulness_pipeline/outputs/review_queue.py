"""The review queue: the audit sample people label, one row per drawn answer (``core.audit``).

The queue is blind: it carries the row key, the ids and the stratum of each drawn answer, and what scored it
(the lineage), never a score, a verdict or a reason, so a reviewer's label cannot lean on the judge's. The
reviewer's tool joins the answer's text by row key. Only answers the judge scored (status ok) are drawn; the
others are counted per stratum in the summary (the Dagster metadata, the ``review sample`` command's lines).

The queue is built from the scored table but is no work of the judge's: the sample depends on the row keys
alone, so a change of judge does not make it stale (only a new scoring of the day does, through the scored
table). BI tools get no view of it: beside the scored table, a view would invite the join that unblinds it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Final

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.allocation import MINIMUM_PER_STRATUM
from faithfulness_pipeline.core.audit import (
    AUDIT_POINT,
    INCLUSION_PROBABILITY,
    NOT_ELIGIBLE,
    ROWS,
    STRATUM,
    STRATUM_ROWS,
    STRATUM_SAMPLE,
    AuditPlan,
    AuditSample,
    audit_plan,
    draw_audit,
)
from faithfulness_pipeline.outputs.kinds import DAY, DayTable, OutputContext
from faithfulness_pipeline.outputs.markdown import cell

#: The stratum's columns, as the queue names them.
STRATA: Final = ("day", "model", "language")
#: What scored each answer: which run, judge and prompt (lineage, no result).
LINEAGE: Final = (S.SCORING_RUN_ID, "judge_model", "prompt_version")

#: The queue's columns but the answer's ids (the id columns of the scored table, as they are there).
QUEUE_SCHEMA: Final = pl.Schema({
    S.ROW_KEY: pl.String(), "day": pl.Date(), "model": pl.String(), "language": pl.String(),
    STRATUM: pl.String(), STRATUM_ROWS: pl.Int64(), STRATUM_SAMPLE: pl.Int64(),
    INCLUSION_PROBABILITY: pl.Float64(), AUDIT_POINT: pl.Float64(),
    **{c: pl.String() for c in LINEAGE},
})

COLUMNS: Final[Mapping[str, str]] = MappingProxyType({
    "row_key": "Key of the drawn answer (joins to scored_conversations.row_key, where its text is).",
    "day": "The day (DATE) in the pipeline's time zone: the first of the stratum's values.",
    "model": "The model that wrote the answer (null when the table has no model column).",
    "language": "The answer's language column (null when the table has none).",
    STRATUM: "The stratum: its day, model and language as a JSON list (a null is a value of its own).",
    STRATUM_ROWS: "Answers of the stratum the judge scored (status ok): the rows the sample is drawn from.",
    STRATUM_SAMPLE: "Answers drawn from the stratum (a share of the sample size, at least 2 where it has them).",
    INCLUSION_PROBABILITY: "stratum_sample / stratum_rows: the chance each scored answer of the stratum had to be "
    "drawn (a simple random sample within the stratum); weight a label by its inverse.",
    AUDIT_POINT: "The answer's audit point in [0, 1) (BLAKE2b of the audit's own salt and the row key): a stratum "
    "takes the answers with the smallest points, so a larger sample holds this one.",
    S.SCORING_RUN_ID: "The run that scored the answer.",
    "judge_model": "The judge that scored the answer (its verdicts stay out of the queue: the review is blind).",
    "prompt_version": "The judge's prompt version.",
})


def _ids(present: list[str], context: OutputContext) -> list[str]:
    """The answer's id columns the rows have: an explicit key, the conversation and turn, a chat's assistant
    turn, the trace and span of rows made of spans."""
    wanted = (context.key_column, context.id_column, context.turn_column, S.ASSISTANT_TURN, S.TRACE_ID, S.SPAN_ID)
    return [c for c in dict.fromkeys(w for w in wanted if w) if c in present and c not in QUEUE_SCHEMA]


def _reads(present: list[str], context: OutputContext) -> list[str]:
    wanted = (S.ROW_KEY, "status", *_ids(present, context), context.model_column, context.language_column, *LINEAGE)
    return [c for c in dict.fromkeys(wanted) if c in present]


def _stratified(rows: pl.DataFrame, context: OutputContext) -> pl.DataFrame:
    """The rows with their stratum as the queue names it (a column the rows lack: null)."""
    def text(column: str) -> pl.Expr:
        return pl.col(column).cast(pl.String) if column in rows.columns else pl.lit(None, dtype=pl.String)

    return rows.with_columns(pl.col(DAY).alias("day"), text(context.model_column).alias("model"),
                             text(context.language_column).alias("language"))


def review_sample(rows: pl.DataFrame, context: OutputContext,
                  per_stratum: Callable[[int], int] | None = None) -> AuditSample:
    """The audit sample of ``context.review_sample_size`` answers of ``rows`` (the columns the queue reads,
    with their day in :data:`DAY`) as queue rows, and its plan; ``per_stratum``: each stratum's sample from its
    eligible rows instead (``core.audit.audit_plan``)."""
    drawn = draw_audit(_stratified(rows, context), context.review_sample_size, STRATA, MINIMUM_PER_STRATUM,
                       per_stratum=per_stratum)
    ids = _ids(rows.columns, context)
    queue = drawn.rows.select(
        S.ROW_KEY, *ids,
        *(pl.col(c) if c in drawn.rows.columns else pl.lit(None, dtype=dtype).alias(c)
          for c, dtype in QUEUE_SCHEMA.items() if c != S.ROW_KEY),
    )
    return AuditSample(queue, drawn.plan)


def review_plan(rows: pl.DataFrame, context: OutputContext) -> AuditPlan:
    """How the sample of ``rows`` is shared out over their strata, from their counts (nothing is hashed)."""
    return audit_plan(_stratified(rows, context), context.review_sample_size, STRATA, MINIMUM_PER_STRATUM)


def _build(rows: pl.DataFrame, context: OutputContext) -> pl.DataFrame:
    return review_sample(rows, context).rows


def strata_md(plan: AuditPlan) -> str:
    """Each stratum's draw and the rows it could not draw from, as a markdown table."""
    if plan.strata.is_empty():
        return "_no rows_"
    head = (STRATUM, ROWS, STRATUM_ROWS, *NOT_ELIGIBLE, STRATUM_SAMPLE, INCLUSION_PROBABILITY)
    lines = [f"{plan.drawn} of {plan.eligible} scored answers drawn (size {plan.size}, at least {plan.minimum} per "
             f"stratum where it has them)", "", "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for row in plan.strata.select(head).iter_rows():
        lines.append("| " + " | ".join(f"{v:.3g}" if isinstance(v, float) else cell("-" if v is None else v, 60)
                                       for v in row) + " |")
    return "\n".join(lines)


REVIEW_QUEUE: Final = DayTable(
    name="review_queue",
    description="One row per answer of the day's audit sample for people to label: a random sample of the scored "
    "answers (status ok), stratified by day x model x language, with each answer's inclusion probability; the "
    "row key and ids but no score, verdict or reason (the review is blind; docs/review.md).",
    columns=COLUMNS,
    kinds=frozenset({"polars"}),
    option="--review-out",
    option_help="Also write the review queue: a random audit sample of --review-sample-size scored answers "
    "(FP_REVIEW_SAMPLE_SIZE, default 100) over the run's day x model x language strata, for people to label "
    "(Parquet; days as for --daily-out; docs/review.md).",
    revision="review-queue-1",
    view=False,
    day_in_rows=True,
    judged=False,
    reads=_reads,
    build=_build,
    schema=lambda context: QUEUE_SCHEMA,
    summary=lambda rows, context: strata_md(review_plan(rows, context)),
    summary_key="strata",
)
