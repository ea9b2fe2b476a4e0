"""The names the Dagster layer's pieces share: assets, the group, the LLM pool, and what each asset's code
version is made of."""

from typing import Final

GROUP: Final = "answer_quality"
#: The concurrency pool of the steps that call the judge (limit in dagster_home/dagster.yaml).
LLM_POOL: Final = "llm_judge"

RAW: Final = "raw_conversations"
CLAIMS: Final = "extracted_claims"
VERDICTS: Final = "judged_claims"
SCORED: Final = "scored_conversations"
CLAIM_TABLE: Final = "claim_table"
DAILY: Final = "daily_answer_quality"
COMPARISON: Final = "daily_model_comparison"
DUCKDB: Final = "answer_quality_duckdb"
REPORT: Final = "answer_quality_report"
EVENTS: Final = "evaluation_events"
ANNOTATIONS: Final = "phoenix_annotations"

# Bump a revision when an asset's own code changes what it writes.
RAW_REVISION: Final = "raw-1"
CLAIMS_REVISION: Final = "claims-3"  # 3: the cached_prompt_tokens column
VERDICTS_REVISION: Final = "verdicts-4"  # 3: the judge_settings_hash column; 4: cached_prompt_tokens columns
SCORED_REVISION: Final = "scored-4"  # 2: the scoring_run_id column; 3: judge_settings_hash; 4: cached_prompt_tokens
CLAIM_TABLE_REVISION: Final = "claim-table-3"
DAILY_REVISION: Final = "daily-3"  # 2: sampled answers and 95 % intervals; 3: skipped answers, cached prompt tokens
COMPARISON_REVISION: Final = "comparison-2"
DUCKDB_REVISION: Final = "duckdb-3"  # 3: the daily_model_comparison view
REPORT_REVISION: Final = "report-1"
EVENTS_REVISION: Final = "events-1"
ANNOTATIONS_REVISION: Final = "annotations-1"

#: Staging columns of tables written before the judge's identity came from the judge resource: they name
#: the judge that produced a row ("model|prompt version") and are dropped on the way to the scored table.
LEGACY_JUDGE_COLUMNS: Final = ("_fp_judge", "_fp_extract_judge", "_fp_verdict_judge")
