"""extracted_claims and judged_claims: the core's one claims -> verdicts flow (``core.flow``), in one step.

One step materialises both (a multi-asset), the same flow as the CLI's, so that a verdict request leaves as
soon as its answers' claims are back and a re-run is served whole rows from the result store. The step runs
in the ``llm_judge`` pool (limit in dagster_home/dagster.yaml), so concurrent runs and backfills never run
more judge steps at once than the pool allows.
"""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
import asyncio
from collections.abc import Callable, Iterator

import dagster as dg
import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.flow import V_USAGE, X_USAGE, RowProgress
from faithfulness_pipeline.core.pipeline import chunks_of, judge_frame, rows_of
from faithfulness_pipeline.defs.metadata import judge_metadata, usage_totals
from faithfulness_pipeline.defs.names import CLAIMS, CLAIMS_REVISION, GROUP, LLM_POOL, RAW, VERDICTS, VERDICTS_REVISION
from faithfulness_pipeline.defs.resources import JudgeResource, ScoringResource, WarehouseResource
from faithfulness_pipeline.judging.stack import JudgeStack


def judge_assets(partitions: dg.PartitionsDefinition[str], versioned: Callable[[str], str]) -> dg.AssetsDefinition:
    """The step that judges a day; ``versioned`` adds the judge's identity to a code version."""

    @dg.multi_asset(
        outs={
            CLAIMS: dg.AssetOut(
                code_version=versioned(CLAIMS_REVISION),
                kinds={"parquet", "llm"},
                description="Step a: the atomic claims of every answer (one LLM extraction per answer, packed into "
                "few requests; shared by both scorers), with what the extraction cost. Empty answers have no "
                "claims and cost nothing. Materialised with judged_claims, in one step.",
            ),
            VERDICTS: dg.AssetOut(
                code_version=versioned(VERDICTS_REVISION),
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
        yield from judge_day(context, raw_conversations, judge, scoring, warehouse)

    return claims_and_verdicts


def judge_day(
    context: dg.AssetExecutionContext,
    raw: pl.DataFrame,
    judge: JudgeResource,
    scoring: ScoringResource,
    warehouse: WarehouseResource,
) -> Iterator[dg.Output[pl.DataFrame]]:
    # Batch mode reports the state of the step's batches while it waits.
    made = judge.make(warehouse.judge_store(), report=context.log.info)
    judged = _judged(context, raw, made, scoring.config().chunk_rows)
    meta = judge_metadata(made.stats(), made.model_name, made.prompt_version)
    # An extraction that failed left no claims; a failure of the verdicts is judged_claims' own.
    extraction_error = pl.when(pl.col(S.CLAIMS).is_null()).then(pl.col(S.ERROR)).otherwise(None)
    claims = judged.select(
        *raw.columns, S.CLAIMS, extraction_error.alias(S.ERROR),
        *[pl.col(x).alias(c) for x, c in zip(X_USAGE, S.USAGE_COLUMNS, strict=True)],
    )
    verdicts = judged.select(
        *raw.columns, S.CLAIMS, S.ERROR, S.VERDICTS, S.CONTEXT_TRUNCATED,
        *[(pl.col(x) + pl.col(v)).alias(c) for x, v, c in zip(X_USAGE, V_USAGE, S.USAGE_COLUMNS, strict=True)],
        S.RESULT_SOURCE, *S.BILLED_COLUMNS,
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
