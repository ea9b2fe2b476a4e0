"""What every published table and column means, in one place.

The same text fills Dagster's ``column_schema`` (``defs/metadata.py``) and the DuckDB comments
(``COMMENT ON VIEW`` / ``COMMENT ON COLUMN`` in ``defs/duckdb_views.py``), so a BI tool and the Dagster UI
describe a column alike. Passthrough columns of the user's own table have no description here.
"""

from __future__ import annotations

from types import MappingProxyType

_SCORED = {
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
}

_CLAIMS = {
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
    **{k: _SCORED[k] for k in ("judge_model", "prompt_version", "scored_at", "day", "ds")},
}

_DAILY = {
    "day": "The day (DATE) in the pipeline's time zone.",
    "model": "The model that wrote the answers (null when the table has no model column).",
    "answers": "Every row of the day and model that landed, error rows and rows outside the sample included.",
    "sampled_answers": "Rows in the run's sample (all of them unless sample_rate < 1): the rows judged.",
    "sample_share": "sampled_answers / answers: the realised sample rate.",
    "scored_answers": "Rows with status ok.",
    "error_answers": "Rows the judge could not score (never averaged in as 0).",
    "skipped_answers": "Rows in the sample that the spend cap (max_cost_usd) left unjudged (status skipped).",
    "error_rate": "error_answers / (sampled_answers - skipped_answers): over the rows judged.",
    "zero_claim_answers": "ok rows without any claim.",
    "claims": "Claims of the ok rows.",
    "supported_claims": "Supported claims.",
    "contradicted_claims": "Contradicted claims (contradicted_claims / claims is the exact claim-weighted rate).",
    "unsupported_claims": "Unsupported claims.",
    "speculative_claims": "Hedged claims.",
    "hallucination_mean": "Mean hallucination score of the rows with a score.",
    "hallucination_mean_low": "Lower bound of the 95 % interval of the mean over every answer of the group (normal, "
    "with the finite-population correction; equal to the mean for a census).",
    "hallucination_mean_high": "Upper bound of that interval.",
    "hallucination_p50": "Median hallucination score (linear interpolation, rounded like the scores).",
    "hallucination_p90": "90th percentile of the hallucination score (linear interpolation, rounded like the scores).",
    "faithfulness_mean": "Mean faithfulness score of the rows with a score.",
    "faithfulness_mean_low": "Lower bound of the 95 % interval of the faithfulness mean (as hallucination_mean_low).",
    "faithfulness_mean_high": "Upper bound of that interval.",
    "faithfulness_p50": "Median faithfulness score (linear interpolation, rounded like the scores).",
    "faithfulness_p90": "90th percentile of the faithfulness score (linear interpolation, rounded like the scores).",
    "hallucination_threshold": "The threshold of over_threshold_* (score units).",
    "over_threshold_answers": "Answers whose hallucination score is above the threshold.",
    "over_threshold_share": "over_threshold_answers / answers with a hallucination score.",
    "over_threshold_share_low": "Lower bound of the share's 95 % interval (Wilson, with the finite-population "
    "correction; equal to the share for a census).",
    "over_threshold_share_high": "Upper bound of that interval.",
    "llm_calls": "LLM requests that produced the day's results (whichever run produced them).",
    "prompt_tokens": "Prompt tokens that produced the day's results.",
    "completion_tokens": "Completion tokens that produced the day's results.",
    "total_tokens": "prompt_tokens + completion_tokens.",
    "cost_usd": "What producing the day's results cost in USD (rows without a price left out).",
    "cost_unknown_answers": "Rows whose cost is unknown (a model without a price).",
    "cached_prompt_tokens": "Of prompt_tokens, those the provider served from its prompt cache.",
    "billed_llm_calls": "LLM requests the run that scored the day paid for.",
    "billed_prompt_tokens": "Prompt tokens the run paid for.",
    "billed_completion_tokens": "Completion tokens the run paid for.",
    "billed_cost_usd": "The provider's bill for scoring the day in USD (null when a model has no price).",
    "billed_cached_prompt_tokens": "Of billed_prompt_tokens, those the provider served from its prompt cache.",
    "store_answers": "Answers served from the result store.",
    "duplicate_answers": "Answers copied from an identical answer of the same run.",
    "store_share": "store_answers / sampled_answers.",
    "duplicate_share": "duplicate_answers / sampled_answers.",
}

#: What each published table holds.
TABLE_DESCRIPTIONS = MappingProxyType({
    "raw_conversations": "One row per judged answer as it landed: every landing column and the row key (and, for "
    "chat rows, the answer, question and context judged). The passages live here; join by row_key and day.",
    "scored_conversations": "One row per judged answer: the user's columns, claims, verdicts, hallucination and "
    "faithfulness scores with reasons, status, judge and usage.",
    "claim_table": "One row per claim with its verdict, reason and evidence, the answer's model, day and "
    "conversation id.",
    "daily_answer_quality": "One row per day x model: answers, errors, score means and percentiles, the share over "
    "the hallucination threshold, claim counts, tokens and cost.",
    "daily_model_comparison": "One row per day x model against the day's first model x score x group (all, each "
    "language): means, the difference with its 95 % interval, and whether it is larger than its noise.",
})

#: Column descriptions per table.
COLUMN_DESCRIPTIONS = MappingProxyType({
    "scored_conversations": MappingProxyType(_SCORED),
    "claim_table": MappingProxyType(_CLAIMS),
    "daily_answer_quality": MappingProxyType(_DAILY),
})


def describe(table: str, column: str) -> str | None:
    """The description of ``table.column``; the scored table's for a staging table of the same column."""
    own = COLUMN_DESCRIPTIONS.get(table)
    return own.get(column) if own is not None else _SCORED.get(column)

