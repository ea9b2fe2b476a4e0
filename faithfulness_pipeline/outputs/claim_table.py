"""The claim table: one row per claim with its verdict, reason and evidence, keyed by the answer's row key."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.outputs import claim_table
from faithfulness_pipeline.outputs.kinds import ChunkTable, OutputContext
from faithfulness_pipeline.outputs.scored_table import COLUMNS as SCORED_COLUMNS

COLUMNS: Final[Mapping[str, str]] = MappingProxyType({
    "row_key": "Key of the judged answer (joins to scored_conversations.row_key).",
    "claim_index": "Position of the claim in the answer (0-based).",
    "claim": "The claim, in the answer's language.",
    "verdict": "supported, contradicted or unsupported, judged against the context only.",
    "speculative": "True when the claim is hedged.",
    "reason": "The judge's reason for the verdict.",
    "evidence": "Text of the passage that decided the verdict (null when none did).",
    "faithfulness_verdict": "Mastra's faithfulness label: yes (supported, unhedged), no (contradicted), unsure.",
    "hallucination_verdict": "Mastra's hallucination label: yes (contradicted or unsupported) or no.",
    "model": "The model that wrote the answer (the model column of the scored table).",
    "conversation_id": "The conversation the answer belongs to.",
    **{k: SCORED_COLUMNS[k] for k in ("judge_model", "prompt_version", "scored_at", "day", "ds")},
})

#: What the warehouse's claim table leaves in scored_conversations' verdicts, where each passage is once; the
#: BI view of the claim table joins it back (``defs.duckdb_views``).
PASSAGES: Final = ("evidence",)


def _carried(columns: list[str], context: OutputContext) -> dict[str, pl.Expr]:
    """What a claim row of a warehouse day carries of its answer, so that drill-downs need no join."""
    if context.day is None:
        return {}
    return {
        "day": pl.lit(context.day, dtype=pl.Date),
        "model": pl.col(context.model_column).cast(pl.String) if context.model_column in columns
        else pl.lit(None, dtype=pl.String),
        "conversation_id": pl.col(context.id_column).cast(pl.String) if context.id_column in columns
        # rows made of spans: the trace is the conversation
        else pl.col(S.TRACE_ID).cast(pl.String) if S.TRACE_ID in columns else pl.lit(None, dtype=pl.String),
    }


def _build(scored: pl.DataFrame, context: OutputContext) -> pl.DataFrame:
    table = claim_table(scored, _carried(scored.columns, context))
    return table.drop(PASSAGES) if context.views_join else table


def _reads(present: list[str], context: OutputContext) -> list[str]:
    wanted = (S.ROW_KEY, context.model_column, context.id_column, S.TRACE_ID, "verdicts", "judge_model",
              "prompt_version", "scored_at")
    return [c for c in dict.fromkeys(wanted) if c in present]


def _verdicts(table: pl.DataFrame) -> Counter[str]:
    return Counter({f"{verdict}_claims": int(n) for verdict, n in table.group_by("verdict").len().rows()})


CLAIM_TABLE: Final = ChunkTable(
    name="claim_table",
    description="One row per claim with its verdict, reason and evidence, keyed by the answer's row_key, with the "
    "answer's day, model and conversation id; the deciding passage stays in scored_conversations' verdicts "
    "(the DuckDB view joins it back).",
    columns=COLUMNS,
    kinds=frozenset({"polars"}),
    option="--claims-out",
    option_help="Also write the claim table (one row per claim, Parquet).",
    revision="claim-table-3",
    checks=("one_row_per_claim",),
    day_in_rows=True,
    build=_build,
    reads=_reads,
    tally=_verdicts,
)
