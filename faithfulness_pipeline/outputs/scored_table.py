"""The scored table: one row per judged answer, with its claims, verdicts, scores, reasons, status, judge and
usage (SPEC §4). Every other output is made of its rows."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

import polars as pl

from faithfulness_pipeline.outputs.kinds import ChunkTable, OutputContext

COLUMNS: Final[Mapping[str, str]] = MappingProxyType({
    "row_key": "Unique key of the judged answer: the id column (+ #turn), a key column, or a content hash.",
    "claims": "The answer's atomic claims, as extracted by the judge (in the answer's language).",
    "verdicts": "One verdict per claim: {claim, verdict, speculative, reason, evidence}.",
    "n_claims": "Number of claims in the answer.",
    "n_supported": "Claims the context supports.",
    "n_contradicted": "Claims the context contradicts.",
    "n_unsupported": "Claims the context neither supports nor contradicts.",
    "n_speculative": "Hedged claims ('may', '可能', '아마').",
    "hallucination_score": "Contradicted or unsupported claims / claims x scale, rounded half-up to 2 decimals; "
    "null for an error row. Lower is better.",
    "faithfulness_score": "Supported, unhedged claims / claims x scale, rounded half-up to 2 decimals; null for an "
    "error row. Higher is better.",
    "hallucination_reason": "Why the hallucination score is what it is (quotes the bad claims).",
    "faithfulness_reason": "Why the faithfulness score is what it is.",
    "status": "ok; error when the judge could not handle the row after every retry; not_sampled when the row is "
    "outside the run's sample (sample_rate): not judged, null scores; skipped when the run's spend cap "
    "(max_cost_usd) was reached before the row was judged: null scores, not an error.",
    "error": "What went wrong for an error row; for a skipped row, the cap that stopped it; null otherwise.",
    "context_truncated": "True when the context alone exceeded the model's window and was cut.",
    "judge_model": "The judge that produced the claims and verdicts (offline-lexical-v1 = the offline baseline).",
    "prompt_version": "Version of the judge's prompts.",
    "judge_settings_hash": "A hash of the judge settings that shape the row's results (prompt versions, model, "
    "endpoint, temperature, seed, output format, context window): two scorings of an answer with equal hashes "
    "were judged alike. Null for a judge that names no settings.",
    "scored_at": "When the row was scored (UTC).",
    "scoring_run_id": "The run that scored the row: the Dagster run id, or the id a CLI run prints in its summary.",
    "llm_calls": "This row's share of the LLM requests that produced its result (fractional: requests are packed).",
    "prompt_tokens": "This row's share of the prompt tokens that produced its result.",
    "completion_tokens": "This row's share of the completion tokens that produced its result.",
    "cost_usd": "What producing the row's result cost in USD (null: no price for the model).",
    "cached_prompt_tokens": "Of prompt_tokens, those the provider served from its prompt cache (priced at its "
    "cached-token price).",
    "result_source": "Where the result came from: llm, store, duplicate, offline, none, not_sampled (outside "
    "the run's sample: no result) or skipped (the spend cap was reached: no result).",
    "billed_llm_calls": "LLM requests this run paid for the row (0 for store hits and copies).",
    "billed_prompt_tokens": "Prompt tokens this run paid for the row.",
    "billed_completion_tokens": "Completion tokens this run paid for the row.",
    "billed_cost_usd": "What this run paid for the row in USD (null: no price for the model).",
    "billed_cached_prompt_tokens": "Of billed_prompt_tokens, those the provider served from its prompt cache and "
    "billed at its cached-token price (0 for store hits and copies).",
    "day": "The conversation's day (its timestamp's date in the pipeline's time zone).",
    "ds": "The partition day (DATE).",
})


def _without_heavy(scored: pl.DataFrame, context: OutputContext) -> pl.DataFrame:
    """The scored rows as the table keeps them: in the warehouse, without the passages and chat messages,
    which raw_conversations keeps (the BI view ``answer_contexts`` joins them back by row key)."""
    return scored.drop([c for c in context.heavy_columns if c in scored.columns]) if context.views_join else scored


SCORED_TABLE: Final = ChunkTable(
    name="scored_conversations",
    description="One row per judged answer: the user's columns, claims, verdicts, hallucination and faithfulness "
    "scores with reasons, status, judge and usage. Scores are Mastra's; error rows have null scores, never 0.",
    columns=COLUMNS,
    kinds=frozenset({"polars"}),
    option="--output",
    short_option="-o",
    option_help="Scored table to write (Parquet).",
    revision="scored-4",  # 2: scoring_run_id; 3: judge_settings_hash; 4: cached_prompt_tokens
    checks=("same_rows_as_upstream", "scores_in_range", "error_rate", "llm_judge_used", "claims_found",
            "within_spend_cap"),
    build=_without_heavy,
)
