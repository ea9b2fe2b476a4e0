"""Column names and polars schemas of every table the product writes.

Internal working columns carry the ``_fp_`` prefix so they never collide with a user's passthrough columns;
they are dropped before a table is written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

# --- internal working columns (between steps) ---------------------------------------------------------
ANSWER = "_fp_answer"
QUESTION = "_fp_question"
CONTEXT = "_fp_context"
CLAIMS = "_fp_claims"
VERDICTS = "_fp_verdicts"  # list<struct<verdict, speculative, reason, evidence_index>>
ERROR = "_fp_error"
INTERNAL_COLUMNS = (ANSWER, QUESTION, CONTEXT, CLAIMS, VERDICTS, ERROR)

# --- public columns -------------------------------------------------------------------------------------
ROW_KEY = "row_key"
#: A span input's ids (traces.conversations): its rows' key when no conversation id is there, and a trace is
#: one sampling decision.
TRACE_ID = "trace_id"
SPAN_ID = "span_id"
ASSISTANT_TURN = "assistant_turn"
CONTEXT_TRUNCATED = "context_truncated"
#: ``cached_prompt_tokens`` (the part of ``prompt_tokens`` served from the provider's prompt cache) comes last:
#: stored results keep their usage numbers in this order, and older ones end before it (they read as 0).
USAGE_COLUMNS = ("llm_calls", "prompt_tokens", "completion_tokens", "cost_usd", "cached_prompt_tokens")

VERDICT_STRUCT = pl.Struct(
    {
        "claim": pl.String,
        "verdict": pl.String,
        "speculative": pl.Boolean,
        "reason": pl.String,
        "evidence": pl.String,
    }
)

# Internal verdict payload: the judge's evidence is an index; the published column holds the passage text.
RAW_VERDICT_STRUCT = pl.Struct(
    {
        "verdict": pl.String,
        "speculative": pl.Boolean,
        "reason": pl.String,
        "evidence_index": pl.Int32,
    }
)

USAGE_SCHEMA: dict[str, pl.DataType] = {
    "llm_calls": pl.Float64(),
    "prompt_tokens": pl.Int64(),
    "completion_tokens": pl.Int64(),
    "cost_usd": pl.Float64(),
    "cached_prompt_tokens": pl.Int64(),
}
#: The run that scored a row (a Dagster run id, or the id a CLI run or a ``score_frame`` call made and the
#: CLI prints), so a warehouse join can tell two scorings of one answer apart.
SCORING_RUN_ID = "scoring_run_id"
#: A hash of the judge settings that shape a row's results (``core.port.settings_hash``): equal hashes mean
#: the same prompts, model, endpoint and output-changing parameters; null for a judge that names none.
JUDGE_SETTINGS = "judge_settings_hash"
#: Where the row's result came from (``core.port.ResultSource``) and what this run paid for it.
RESULT_SOURCE = "result_source"
BILLED_COLUMNS = tuple(f"billed_{c}" for c in USAGE_COLUMNS)
BILLED_SCHEMA: dict[str, pl.DataType] = {f"billed_{n}": d for n, d in USAGE_SCHEMA.items()}

#: Columns the scorer adds after the passthrough columns, in this order (SPEC §4).
SCORED_COLUMNS: dict[str, pl.DataType] = {
    ROW_KEY: pl.String(),
    "claims": pl.List(pl.String),
    "verdicts": pl.List(VERDICT_STRUCT),
    "n_claims": pl.Int32(),
    "n_supported": pl.Int32(),
    "n_contradicted": pl.Int32(),
    "n_unsupported": pl.Int32(),
    "n_speculative": pl.Int32(),
    "hallucination_score": pl.Float64(),
    "faithfulness_score": pl.Float64(),
    "hallucination_reason": pl.String(),
    "faithfulness_reason": pl.String(),
    "status": pl.String(),
    "error": pl.String(),
    CONTEXT_TRUNCATED: pl.Boolean(),
    "judge_model": pl.String(),
    "prompt_version": pl.String(),
    JUDGE_SETTINGS: pl.String(),
    "scored_at": pl.Datetime("us", "UTC"),
    SCORING_RUN_ID: pl.String(),
    **USAGE_SCHEMA,
    RESULT_SOURCE: pl.String(),
    **BILLED_SCHEMA,
}

#: Columns that describe the run rather than the result: two runs of the same rows differ in them alone.
RUN_COLUMNS = ("scored_at", SCORING_RUN_ID, RESULT_SOURCE, *BILLED_COLUMNS)

#: One row per claim (the claim table), keyed by the scored row's key.
CLAIM_TABLE_SCHEMA: dict[str, pl.DataType] = {
    ROW_KEY: pl.String(),
    "claim_index": pl.Int32(),
    "claim": pl.String(),
    "verdict": pl.String(),
    "speculative": pl.Boolean(),
    "reason": pl.String(),
    "evidence": pl.String(),
    "faithfulness_verdict": pl.String(),
    "hallucination_verdict": pl.String(),
    "judge_model": pl.String(),
    "prompt_version": pl.String(),
    "scored_at": pl.Datetime("us", "UTC"),
}

#: An input column a source fills on rows that hold nothing to judge, with why (a span without an answer,
#: ``traces.conversations``): such a row is an error row with that reason, never the perfect 0 of an answer
#: without claims. Null on every other row.
NOTHING_TO_JUDGE = "nothing_to_judge"

STATUS_OK = "ok"
STATUS_ERROR = "error"
#: A row outside the run's sample (``core.sampling``): not judged, null scores, nothing spent.
STATUS_NOT_SAMPLED = "not_sampled"
#: The ``result_source`` of such a row.
SOURCE_NOT_SAMPLED = "not_sampled"
#: A row left unjudged because the run's spend cap was reached (``judging.budget``): null scores, its
#: ``error`` names the cap; never an error row. Its ``result_source`` is the same word.
STATUS_SKIPPED = "skipped"
SOURCE_SKIPPED = "skipped"
#: Rows that were not judged, on purpose: scored tables keep them with null scores.
UNJUDGED_STATUSES = (STATUS_NOT_SAMPLED, STATUS_SKIPPED)


def dtype_holds(dtype: Any, test: Callable[[Any], bool]) -> bool:
    """Whether ``dtype`` or a type nested in it (a list's or an array's items, a struct's fields) passes ``test``."""
    if test(dtype):
        return True
    if isinstance(dtype, pl.List | pl.Array):
        return dtype_holds(dtype.inner, test)
    if isinstance(dtype, pl.Struct):
        return any(dtype_holds(field.dtype, test) for field in dtype.fields)
    return False
