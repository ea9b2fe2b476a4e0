"""The assets: thin wiring of the scoring core, one asset per stage and per output, one partition per day.

raw_conversations -> extracted_claims -> judged_claims -> scored_conversations -> claim_table
                                                                              -> daily_answer_quality
                                                                              -> daily_model_comparison
                                                                              -> review_queue
                                                                              (-> evaluation_events,
                                                                                  phoenix_annotations)
every table -> answer_quality_duckdb, answer_quality_report

The stages are modules (``raw``, ``judged``); every output of the list (``outputs.catalog``) is made by one
helper (``defs.outputs``), and so are its checks (``defs.checks``). Code versions of everything the judge
produces carry the judge model and prompt version: after a prompt change Dagster shows those tables as stale.
"""

import warnings
from collections.abc import Mapping

import dagster as dg

from faithfulness_pipeline.defs import checks
from faithfulness_pipeline.defs.bi import answer_quality_duckdb, answer_quality_report
from faithfulness_pipeline.defs.judged import judge_assets
from faithfulness_pipeline.defs.labels import answer_labels
from faithfulness_pipeline.defs.names import CLAIMS, RAW, SCORED, VERDICTS
from faithfulness_pipeline.defs.outputs import output_assets
from faithfulness_pipeline.defs.raw import raw_asset
from faithfulness_pipeline.outputs import tables
from faithfulness_pipeline.settings.traces import TraceExportSettings


def build_assets(
    partitions: dg.PartitionsDefinition[str], judge_version: str, traces: TraceExportSettings, table_format: str,
    judge_tags: Mapping[str, str] | None = None,
) -> list[dg.AssetsDefinition]:
    """All assets for ``partitions``; ``judge_version`` ("model:prompt version") goes into code versions;
    ``traces`` names the systems scores go back to; ``table_format`` is the warehouse's; ``judge_tags`` are
    the judge steps' own (a Celery queue)."""

    def versioned(revision: str) -> str:
        return f"{revision}:{judge_version}"

    return [
        raw_asset(partitions),
        judge_assets(partitions, versioned, judge_tags),
        answer_labels,
        *output_assets(partitions, versioned, traces, table_format),
        answer_quality_duckdb,
        answer_quality_report,
    ]


def build_checks(partitions: dg.PartitionsDefinition[str]) -> list[dg.AssetChecksDefinition]:
    """The judging stages' row checks, and the checks every output table names."""
    # Partitioned asset checks are a "preview" feature of Dagster 1.13; without a partitions_def a check
    # would load every partition of its asset, so the preview is the right tool and its warning is noise.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        stages = [checks.rows_preserved_check(CLAIMS, RAW, partitions),
                  checks.rows_preserved_check(VERDICTS, CLAIMS, partitions)]
        return stages + [checks.CHECKS[name](table.name, VERDICTS if table.name == SCORED else SCORED, partitions)
                         for table in tables() for name in table.checks]
