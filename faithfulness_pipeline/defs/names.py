"""The names the Dagster layer's pieces share: the stage assets, the group, the LLM pool, and what each stage
asset's code version is made of. The outputs' names and revisions are their entries' (``outputs.catalog``)."""

from typing import Final

from faithfulness_pipeline.outputs.catalog import RAW_TABLE
from faithfulness_pipeline.outputs.scored_table import SCORED_TABLE

GROUP: Final = "answer_quality"
#: The concurrency pool of the steps that call the judge (limit in dagster_home/dagster.yaml).
LLM_POOL: Final = "llm_judge"

RAW: Final = RAW_TABLE
CLAIMS: Final = "extracted_claims"
VERDICTS: Final = "judged_claims"
#: The table every other output is made of.
SCORED: Final = SCORED_TABLE.name
#: People's labels, read into the warehouse (the corrected figures depend on them), in a group and job of their own.
LABELS: Final = "answer_labels"
LABELS_GROUP: Final = "people_labels"
LABELS_JOB: Final = "read_labels"
DUCKDB: Final = "answer_quality_duckdb"
REPORT: Final = "answer_quality_report"

# Bump a revision when an asset's own code changes what it writes.
RAW_REVISION: Final = "raw-1"
CLAIMS_REVISION: Final = "claims-3"  # 3: the cached_prompt_tokens column
VERDICTS_REVISION: Final = "verdicts-4"  # 3: the judge_settings_hash column; 4: cached_prompt_tokens columns
DUCKDB_REVISION: Final = "duckdb-3"  # 3: the daily_model_comparison view
REPORT_REVISION: Final = "report-1"
LABELS_REVISION: Final = "labels-1"

#: Staging columns of tables written before the judge's identity came from the judge resource: they name
#: the judge that produced a row ("model|prompt version") and are dropped on the way to the scored table.
LEGACY_JUDGE_COLUMNS: Final = ("_fp_judge", "_fp_extract_judge", "_fp_verdict_judge")
