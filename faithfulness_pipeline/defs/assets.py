"""The assets: thin wiring of the scoring core, one asset per stage, one Parquet partition per day.

raw_conversations -> extracted_claims -> judged_claims -> scored_conversations -> claim_table
                                                                              -> daily_answer_quality
scored_conversations + claim_table + daily_answer_quality -> answer_quality_duckdb

``extracted_claims`` and ``judged_claims`` are materialised by one step (a multi-asset): the core's one
claims -> verdicts flow (``core.flow``), the same as the CLI's, so that a verdict request leaves as soon
as its answers' claims are back and a re-run is served whole rows from the result store. The step runs
in the ``llm_judge`` pool (limit in dagster_home/dagster.yaml), so concurrent runs and backfills never run
more judge steps at once than the pool allows. Code versions of everything the judge produces carry the
judge model and prompt version: after a prompt change Dagster shows those tables as stale.
"""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
import asyncio
import warnings
from collections.abc import Iterator
from datetime import date

import dagster as dg
import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.aggregates import daily_aggregates
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.core.flow import V_USAGE, X_USAGE, RowProgress
from faithfulness_pipeline.core.io import file_schema
from faithfulness_pipeline.core.normalize import KeyRegistry, prepare
from faithfulness_pipeline.core.outputs import claim_table as build_claim_table
from faithfulness_pipeline.core.pipeline import chunks_of, judge_frame, rows_of, score_step
from faithfulness_pipeline.defs import checks
from faithfulness_pipeline.defs.calibration import latest_calibration
from faithfulness_pipeline.defs.duckdb_views import BI_TABLES, build_database
from faithfulness_pipeline.defs.landing import list_landing, load_day, rows_before
from faithfulness_pipeline.defs.metadata import (
    aggregates_md,
    judge_metadata,
    report_metadata,
    scored_metadata,
    usage_totals,
)
from faithfulness_pipeline.defs.resources import JudgeResource, LandingResource, ScoringResource, WarehouseResource
from faithfulness_pipeline.judging.stack import JudgeStack

GROUP = "answer_quality"
LLM_POOL = "llm_judge"

RAW = "raw_conversations"
CLAIMS = "extracted_claims"
VERDICTS = "judged_claims"
SCORED = "scored_conversations"
CLAIM_TABLE = "claim_table"
DAILY = "daily_answer_quality"
DUCKDB = "answer_quality_duckdb"
REPORT = "answer_quality_report"

# Bump a revision when an asset's own code changes what it writes.
_RAW_REVISION = "raw-1"
_CLAIMS_REVISION = "claims-2"
_VERDICTS_REVISION = "verdicts-2"
_SCORED_REVISION = "scored-1"
_CLAIM_TABLE_REVISION = "claim-table-2"
_DAILY_REVISION = "daily-1"
_DUCKDB_REVISION = "duckdb-2"
_REPORT_REVISION = "report-1"

# Staging column: which judge produced the claims and verdicts ("model|prompt version"); dropped before scoring.
_JUDGE = "_fp_judge"


def _progress(context: dg.AssetExecutionContext, total: int) -> RowProgress:
    """Logs every tenth of the way: the UI shows how far a long LLM step is."""
    done = [0.0, 0.0]  # rows finished (each row counts half per LLM step), rows at the last log line

    def report(rows: float) -> None:
        done[0] += rows
        if total and done[0] - done[1] >= total / 10:
            done[1] = done[0]
            context.log.info(f"claims and verdicts: {min(done[0], total):.0f} of {total} rows")

    return report


def _judged(context: dg.AssetExecutionContext, frame: pl.DataFrame, judge: JudgeStack, chunk_rows: int) -> pl.DataFrame:
    """The claims, verdicts and usage (extraction and verdicts apart) of every row; the judge is closed after."""
    progress = _progress(context, frame.height)

    async def run() -> pl.DataFrame:
        try:
            await judge.prepay(rows_of(lambda: chunks_of(frame, chunk_rows), None))
            return await judge_frame(frame, judge.judging(), chunk_rows, progress)
        finally:
            await judge.aclose()

    return asyncio.run(run())


def _judge_identity(frame: pl.DataFrame) -> tuple[str, str]:
    """judge_model and prompt_version for the scored table; every judge's when partitions were judged by
    several (the table of an older run may carry the staging columns of both former steps)."""
    labels: list[str] = []
    for column in (_JUDGE, "_fp_extract_judge", "_fp_verdict_judge"):
        if column in frame.columns:
            labels += [v for v in frame.get_column(column).unique().sort().to_list() if v and v not in labels]
    models = list(dict.fromkeys(label.split("|", 1)[0] for label in labels))
    prompts = list(dict.fromkeys(label.split("|", 1)[1] for label in labels))
    return " + ".join(models), " + ".join(prompts)


def build_assets(partitions: dg.PartitionsDefinition[str], judge_version: str) -> list[dg.AssetsDefinition]:
    """All assets for ``partitions``; ``judge_version`` ("model:prompt version") goes into code versions."""

    def versioned(revision: str) -> str:
        return f"{revision}:{judge_version}"

    @dg.asset(
        name=RAW,
        group_name=GROUP,
        partitions_def=partitions,
        code_version=_RAW_REVISION,
        kinds={"parquet", "polars"},
        check_specs=checks.input_check_specs(RAW),
        description="Conversations of the day from the landing location, validated and normalised: one row per "
        "judged answer (passthrough columns + row_key + the answer, question and context that will be judged).",
    )
    def raw_conversations(
        context: dg.AssetExecutionContext, landing: LandingResource, scoring: ScoringResource
    ) -> Iterator[dg.Output[pl.DataFrame] | dg.AssetCheckResult]:
        day = date.fromisoformat(context.partition_key)
        config = scoring.config()
        files = list_landing(landing.path)
        if not files:
            raise InputError(
                f"the landing location {landing.path!r} holds no Parquet, JSON Lines or CSV files yet"
            )
        prepared: list[pl.DataFrame] = []
        schemas = []
        keyed = []
        for file, frame in load_day(files, day, landing.timestamp_column, landing.undated(), landing.zone()):
            # One registry per file: duplicates across files are reported by the unique-keys check, which
            # can name the files; duplicates inside one file are refused here with examples.
            try:
                table = prepare(frame, config, KeyRegistry())
            except InputError as exc:
                raise InputError(
                    f"landing file {file.path!r} cannot be scored: {exc} In Dagster, the column names are the "
                    f"scoring resource's *_column settings."
                ) from None
            prepared.append(table)
            schemas.append((file, file_schema(file.path), frame.height))
            keyed.append((file, table.get_column(S.ROW_KEY)))
        # Columns of different types across files are united here and reported by the blocking input_schema
        # check below (the raw table is kept for inspection); the CLI refuses them by the same rule.
        raw = pl.concat(prepared, how="diagonal_relaxed")
        contributing = sum(1 for _, _, rows in schemas if rows)
        first = partitions.get_first_partition_key()
        early = [] if first is None else [
            (file, rows_before(file, date.fromisoformat(first), landing.timestamp_column, landing.undated(),
                               landing.timezone))
            for file in files
        ]
        if any(n for _, n in early):
            context.log.warning(
                f"{sum(n for _, n in early)} landing row(s) are dated before the first partition {first} and are "
                f"never scored (see the {checks.BEFORE_START} check)"
            )
        yield dg.Output(
            raw,
            metadata={"landing": landing.path, "landing_files": len(files), "files_with_rows": contributing,
                      "rows_before_partitions_start": sum(n for _, n in early)},
        )
        yield checks.input_schema_result(
            RAW,
            schemas,
            required=landing.required_columns,
            model_column=scoring.model_column,
            timestamp_column=landing.timestamp_column,
        )
        yield checks.unique_keys_result(RAW, keyed)
        yield checks.before_start_result(RAW, first or "", early)

    @dg.multi_asset(
        outs={
            CLAIMS: dg.AssetOut(
                code_version=versioned(_CLAIMS_REVISION),
                kinds={"parquet", "llm"},
                description="Step a: the atomic claims of every answer (one LLM extraction per answer, packed into "
                "few requests; shared by both scorers), with what the extraction cost. Empty answers have no "
                "claims and cost nothing. Materialised with judged_claims, in one step.",
            ),
            VERDICTS: dg.AssetOut(
                code_version=versioned(_VERDICTS_REVISION),
                kinds={"parquet", "llm"},
                description="Step b: a verdict for every claim against the answer's context only (supported / "
                "contradicted / unsupported, hedging, reason, evidence). An empty context makes no call.",
            ),
        },
        internal_asset_deps={CLAIMS: {dg.AssetKey(RAW)}, VERDICTS: {dg.AssetKey(CLAIMS)}},
        group_name=GROUP,
        partitions_def=partitions,
        pool=LLM_POOL,
        can_subset=False,
    )
    def claims_and_verdicts(
        context: dg.AssetExecutionContext,
        raw_conversations: pl.DataFrame,
        judge: JudgeResource,
        scoring: ScoringResource,
        warehouse: WarehouseResource,
    ) -> Iterator[dg.Output[pl.DataFrame]]:
        # batch mode reports the state of the step's batches while it waits
        made = judge.make(warehouse.judge_store(), report=context.log.info)
        judged = _judged(context, raw_conversations, made, scoring.config().chunk_rows)
        label = pl.lit(f"{made.model_name}|{made.prompt_version}", dtype=pl.String).alias(_JUDGE)
        meta = judge_metadata(made.stats(), made.model_name, made.prompt_version)
        # An extraction that failed left no claims; a failure of the verdicts is judged_claims' own.
        extraction_error = pl.when(pl.col(S.CLAIMS).is_null()).then(pl.col(S.ERROR)).otherwise(None)
        claims = judged.select(
            *raw_conversations.columns, S.CLAIMS, extraction_error.alias(S.ERROR),
            *[pl.col(x).alias(c) for x, c in zip(X_USAGE, S.USAGE_COLUMNS, strict=True)], label,
        )
        verdicts = judged.select(
            *raw_conversations.columns, S.CLAIMS, S.ERROR, S.VERDICTS, S.CONTEXT_TRUNCATED,
            *[(pl.col(x) + pl.col(v)).alias(c) for x, v, c in zip(X_USAGE, V_USAGE, S.USAGE_COLUMNS, strict=True)],
            S.RESULT_SOURCE, *S.BILLED_COLUMNS, label,
        )
        # What the step sent is one figure for both tables: it is on judged_claims. extracted_claims says what
        # producing its claims cost (the extraction's share of the requests, stored results included).
        yield dg.Output(claims, output_name=CLAIMS, metadata={
            "judge_model": made.model_name,
            "prompt_version": made.prompt_version,
            "claims": int(claims.get_column(S.CLAIMS).list.len().sum() or 0),
            "error_rows": int(claims.get_column(S.ERROR).is_not_null().sum()),
            **{f"extraction_{k}": v for k, v in usage_totals(claims).items()},
        })
        yield dg.Output(verdicts, output_name=VERDICTS, metadata={
            **meta,
            "error_rows": int(verdicts.get_column(S.ERROR).is_not_null().sum()),
            "context_truncated_rows": int(verdicts.get_column(S.CONTEXT_TRUNCATED).sum() or 0),
        })

    @dg.asset(
        name=SCORED,
        group_name=GROUP,
        partitions_def=partitions,
        code_version=versioned(_SCORED_REVISION),
        kinds={"parquet", "polars"},
        description="The scored table (one row per judged answer): passthrough columns, claims, verdicts, "
        "counts, hallucination and faithfulness scores with reasons, status/error, judge model, prompt "
        "version and usage. Scores are Mastra's; error rows have null scores, never 0.",
    )
    def scored_conversations(
        context: dg.AssetExecutionContext, judged_claims: pl.DataFrame, scoring: ScoringResource
    ) -> dg.Output[pl.DataFrame]:
        config = scoring.config()
        model, prompt = _judge_identity(judged_claims)
        staged = judged_claims.drop([c for c in (_JUDGE, "_fp_extract_judge", "_fp_verdict_judge")
                                     if c in judged_claims.columns])
        scored = score_step(staged, config, judge_model=model, prompt_version=prompt)
        metadata = scored_metadata(scored, scale=config.scale, answer_column=config.columns.output)
        metadata["calibration"] = latest_calibration(context.instance, model, prompt)
        return dg.Output(scored, metadata=metadata)

    @dg.asset(
        name=CLAIM_TABLE,
        group_name=GROUP,
        partitions_def=partitions,
        code_version=versioned(_CLAIM_TABLE_REVISION),
        kinds={"parquet", "polars"},
        description="One row per claim with its verdict, reason and evidence, keyed by the answer's row_key, "
        "with the answer's day, model and conversation id (drill-downs need no join).",
    )
    def claim_table(
        context: dg.AssetExecutionContext, scored_conversations: pl.DataFrame, scoring: ScoringResource
    ) -> dg.Output[pl.DataFrame]:
        columns = scored_conversations.columns
        carry = {
            "day": pl.lit(date.fromisoformat(context.partition_key), dtype=pl.Date),
            "model": pl.col(scoring.model_column).cast(pl.String) if scoring.model_column in columns
            else pl.lit(None, dtype=pl.String),
            "conversation_id": pl.col(scoring.id_column).cast(pl.String) if scoring.id_column in columns
            else pl.lit(None, dtype=pl.String),
        }
        table = build_claim_table(scored_conversations, carry)
        by_verdict = dict(table.group_by("verdict").len().sort("verdict").rows())
        return dg.Output(table, metadata={f"{v}_claims": int(n) for v, n in by_verdict.items()})

    @dg.asset(
        name=DAILY,
        group_name=GROUP,
        partitions_def=partitions,
        code_version=versioned(_DAILY_REVISION),
        kinds={"parquet", "polars"},
        description="BI aggregates per day x model: answers, errors, mean/p50/p90 of both scores, share over "
        "the hallucination threshold, claim counts, tokens and cost.",
    )
    def daily_answer_quality(
        context: dg.AssetExecutionContext, scored_conversations: pl.DataFrame, scoring: ScoringResource
    ) -> dg.Output[pl.DataFrame]:
        day = date.fromisoformat(context.partition_key)
        dated = scored_conversations.with_columns(pl.lit(day, dtype=pl.Date).alias("__fp_day"))
        table = daily_aggregates(
            dated,
            day_column="__fp_day",
            model_column=scoring.model_column,
            hallucination_threshold=scoring.hallucination_threshold,
        )
        models = " + ".join(sorted({m for m in scored_conversations.get_column("judge_model").unique() if m}))
        prompts = " + ".join(sorted({p for p in scored_conversations.get_column("prompt_version").unique() if p}))
        return dg.Output(table, metadata={
            "preview": dg.MetadataValue.md(aggregates_md(table)),
            "calibration": latest_calibration(context.instance, models, prompts),
        })

    @dg.asset(
        name=DUCKDB,
        group_name=GROUP,
        code_version=_DUCKDB_REVISION,
        kinds={"duckdb"},
        deps=list(BI_TABLES),
        description="DuckDB file with views over the BI tables (all days). Open it from any SQL BI tool.",
    )
    def answer_quality_duckdb(warehouse: WarehouseResource) -> dg.MaterializeResult:  # type: ignore[type-arg]
        target = warehouse.duckdb_file()
        rows = build_database(target, warehouse.root_path())
        return dg.MaterializeResult(
            metadata={
                "path": dg.MetadataValue.path(str(target)),
                **{f"rows_{t}": n for t, n in rows.items()},
                "connect": f"duckdb {target}",
            }
        )

    @dg.asset(
        name=REPORT,
        group_name=GROUP,
        code_version=_REPORT_REVISION,
        kinds={"html"},
        deps=[SCORED, CLAIM_TABLE, DAILY],
        description="The answer-quality report over every day of the warehouse: one self-contained HTML file "
        "(charts, per day x model table, the worst answers with their claims marked, the judge and its "
        "calibration when the warehouse has one). Opens offline; small enough to mail.",
    )
    def answer_quality_report(warehouse: WarehouseResource, scoring: ScoringResource) -> dg.MaterializeResult:  # type: ignore[type-arg]
        from faithfulness_pipeline.judging.offline.judge import OFFLINE_MODEL_NAME
        from faithfulness_pipeline.report import build_report, headline

        path, data = build_report(
            str(warehouse.root_path()),
            warehouse.report_file(),
            baseline_judges=frozenset({OFFLINE_MODEL_NAME}),
            scoring=scoring,
        )
        return dg.MaterializeResult(metadata=report_metadata(path, headline(data), data.threshold))

    return [
        raw_conversations,
        claims_and_verdicts,
        scored_conversations,
        claim_table,
        daily_answer_quality,
        answer_quality_duckdb,
        answer_quality_report,
    ]


def build_checks(partitions: dg.PartitionsDefinition[str]) -> list[dg.AssetChecksDefinition]:
    # Partitioned asset checks are a "preview" feature of Dagster 1.13; without a partitions_def a check
    # would load every partition of its asset, so the preview is the right tool and its warning is noise.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return _checks(partitions)


def _checks(partitions: dg.PartitionsDefinition[str]) -> list[dg.AssetChecksDefinition]:
    return [
        checks.rows_preserved_check(CLAIMS, RAW, partitions),
        checks.rows_preserved_check(VERDICTS, CLAIMS, partitions),
        checks.rows_preserved_check(SCORED, VERDICTS, partitions),
        checks.claims_preserved_check(CLAIM_TABLE, SCORED, partitions),
        checks.aggregates_preserved_check(DAILY, SCORED, partitions),
        checks.scores_in_range_check(SCORED, partitions),
        checks.error_rate_check(SCORED, partitions),
        checks.offline_fallback_check(SCORED, partitions),
    ]
