"""The assets: thin wiring of the scoring core, one asset per stage, one Parquet partition per day.

raw_conversations -> extracted_claims -> judged_claims -> scored_conversations -> claim_table
                                                                              -> daily_answer_quality
                                                                              -> daily_model_comparison
scored_conversations + claim_table + daily_answer_quality -> answer_quality_duckdb, answer_quality_report

Each stage is a module (``raw``, ``judged``, ``scored``, ``bi``); the daily ones are built here for the
code location's partitions. Code versions of everything the judge produces carry the judge model and prompt
version: after a prompt change Dagster shows those tables as stale.
"""

import warnings
from collections.abc import Mapping

import dagster as dg

from faithfulness_pipeline.defs import checks
from faithfulness_pipeline.defs.bi import answer_quality_duckdb, answer_quality_report
from faithfulness_pipeline.defs.compared import comparison_asset
from faithfulness_pipeline.defs.judged import judge_assets
from faithfulness_pipeline.defs.names import CLAIM_TABLE, CLAIMS, DAILY, RAW, SCORED, VERDICTS
from faithfulness_pipeline.defs.raw import raw_asset
from faithfulness_pipeline.defs.scored import scored_assets


def build_assets(
    partitions: dg.PartitionsDefinition[str], judge_version: str, judge_tags: Mapping[str, str] | None = None
) -> list[dg.AssetsDefinition]:
    """All assets for ``partitions``; ``judge_version`` ("model:prompt version") goes into code versions;
    ``judge_tags`` are the judge steps' own (a Celery queue)."""

    def versioned(revision: str) -> str:
        return f"{revision}:{judge_version}"

    return [
        raw_asset(partitions),
        judge_assets(partitions, versioned, judge_tags),
        *scored_assets(partitions, versioned),
        comparison_asset(partitions, versioned),
        answer_quality_duckdb,
        answer_quality_report,
    ]


def build_checks(partitions: dg.PartitionsDefinition[str]) -> list[dg.AssetChecksDefinition]:
    # Partitioned asset checks are a "preview" feature of Dagster 1.13; without a partitions_def a check
    # would load every partition of its asset, so the preview is the right tool and its warning is noise.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return [
            checks.rows_preserved_check(CLAIMS, RAW, partitions),
            checks.rows_preserved_check(VERDICTS, CLAIMS, partitions),
            checks.rows_preserved_check(SCORED, VERDICTS, partitions),
            checks.claims_preserved_check(CLAIM_TABLE, SCORED, partitions),
            checks.aggregates_preserved_check(DAILY, SCORED, partitions),
            checks.scores_in_range_check(SCORED, partitions),
            checks.error_rate_check(SCORED, partitions),
            checks.claims_found_check(SCORED, partitions),
            checks.offline_fallback_check(SCORED, partitions),
            checks.spend_cap_check(SCORED, partitions),
        ]
