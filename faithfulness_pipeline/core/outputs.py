"""Tables derived from the scored table: the claim table and the Mastra-shaped export (SPEC §4)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.scoring import faithfulness_label, hallucination_label

HALLUCINATION_SCORER_ID = "hallucination-scorer"
FAITHFULNESS_SCORER_ID = "faithfulness-scorer"


def claim_table(scored: pl.DataFrame, carry: dict[str, pl.Expr] | None = None) -> pl.DataFrame:
    """One row per claim with the row key; rows without verdicts (errors, no claims) contribute none.

    ``carry`` adds columns of the answer after ``row_key`` (name -> expression over the scored table), e.g.
    its model, day and conversation id, so a drill-down into the claims needs no join.
    """
    carry = carry or {}
    extra = [expr.alias(name) for name, expr in carry.items()]
    base = scored.select(S.ROW_KEY, *extra, "verdicts", "judge_model", "prompt_version", "scored_at").filter(
        pl.col("verdicts").list.len() > 0
    )
    exploded = (
        base.with_columns(pl.int_ranges(pl.col("verdicts").list.len(), dtype=pl.Int32).alias("claim_index"))
        .explode(["verdicts", "claim_index"])
        .unnest("verdicts")
    )
    verdict = pl.col("verdict")
    speculative = pl.col("speculative").fill_null(False)
    exploded = exploded.with_columns(
        pl.when(verdict == "contradicted")
        .then(pl.lit("no"))
        .when((verdict == "supported") & ~speculative)
        .then(pl.lit("yes"))
        .otherwise(pl.lit("unsure"))
        .alias("faithfulness_verdict"),
        pl.when(verdict == "supported").then(pl.lit("no")).otherwise(pl.lit("yes")).alias("hallucination_verdict"),
    )
    columns = [pl.col(n).cast(d) for n, d in S.CLAIM_TABLE_SCHEMA.items()]
    return exploded.select(columns[0], *carry, *columns[1:])


def mastra_records(scored: pl.DataFrame) -> Iterator[dict[str, Any]]:
    """Two records per row (one per scorer) shaped like Mastra's ``scorer.run()`` result.

    Error rows are exported too, with ``score: null`` and the error in ``reason``, rows the spend cap skipped
    with ``score: null`` and the cap in ``reason``, and rows outside the sample with ``score: null`` and no
    reason, so nothing vanishes.
    """
    columns = [S.ROW_KEY, "claims", "verdicts", "hallucination_score", "faithfulness_score",
               "hallucination_reason", "faithfulness_reason", "status", "error"]
    for row in scored.select(columns).iter_rows(named=True):
        claims = row["claims"] or []
        verdicts = row["verdicts"] or []
        failed = row["status"] in (S.STATUS_ERROR, S.STATUS_SKIPPED)
        yield {
            "runId": row[S.ROW_KEY],
            "scorerId": HALLUCINATION_SCORER_ID,
            "score": row["hallucination_score"],
            "reason": row["error"] if failed else row["hallucination_reason"],
            "preprocessStepResult": {"claims": claims},
            "analyzeStepResult": {
                "verdicts": [
                    {"statement": v["claim"], "verdict": hallucination_label(v["verdict"]), "reason": v["reason"] or ""}
                    for v in verdicts
                ]
            },
        }
        yield {
            "runId": row[S.ROW_KEY],
            "scorerId": FAITHFULNESS_SCORER_ID,
            "score": row["faithfulness_score"],
            "reason": row["error"] if failed else row["faithfulness_reason"],
            "preprocessStepResult": {"claims": claims},
            "analyzeStepResult": {
                "verdicts": [
                    {"verdict": faithfulness_label(v["verdict"], bool(v["speculative"])), "reason": v["reason"] or ""}
                    for v in verdicts
                ]
            },
        }


def mastra_jsonl_lines(scored: pl.DataFrame) -> Iterator[str]:
    for record in mastra_records(scored):
        yield json.dumps(record, ensure_ascii=False) + "\n"
