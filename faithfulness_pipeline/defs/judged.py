"""extracted_claims and judged_claims: the core's one claims -> verdicts flow (``core.flow``), a day in shards.

A day is judged as ``judge.shards`` shards, each its own step in the ``llm_judge`` pool (limit in the
instance's dagster.yaml), so Dagster's executor runs them side by side (processes here, pods with the k8s
executor) and concurrent runs never run more judge steps at once than the pool allows:

    shard_plan -> judge_shard x S (pool llm_judge) -> combine -> extracted_claims, judged_claims

A row's shard follows from a hash of its question and answer, so identical contents meet in one shard and
are paid once there, as in a single step. Each shard streams the day's raw_conversations chunk by chunk
through the same flow as the CLI (a verdict request leaves as soon as its answers' claims are back; a
re-run is served whole rows from the result store) and writes its rows, with their position in the day, to
a staging file in the warehouse; ``combine`` merges the shards back into the day's order and writes the two
tables, each holding the row key and its own columns. Nothing holds a whole day.
"""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
import asyncio
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import dagster as dg
import polars as pl

from faithfulness_pipeline.api.run import judge_run
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.flow import V_USAGE, X_USAGE, RowProgress
from faithfulness_pipeline.core.normalize import with_internals
from faithfulness_pipeline.core.pipeline import sample_of
from faithfulness_pipeline.core.port import JudgeStats
from faithfulness_pipeline.core.sampling import Sample
from faithfulness_pipeline.defs.io import STEP_IO
from faithfulness_pipeline.defs.metadata import judge_metadata, table_metadata, usage_totals, version_metadata
from faithfulness_pipeline.defs.names import (
    CLAIMS,
    CLAIMS_REVISION,
    GROUP,
    LLM_POOL,
    RAW,
    VERDICTS,
    VERDICTS_REVISION,
)
from faithfulness_pipeline.defs.resources import JudgeResource, ScoringResource
from faithfulness_pipeline.defs.warehouse import WarehouseResource

#: The two tables' columns, for a day without rows.
_CLAIMS_TYPES: dict[str, pl.DataType] = {S.ROW_KEY: pl.String(), S.CLAIMS: pl.List(pl.String), S.ERROR: pl.String()}
_VERDICTS_TYPES: dict[str, pl.DataType] = {
    S.ROW_KEY: pl.String(), S.VERDICTS: pl.List(S.RAW_VERDICT_STRUCT), S.CONTEXT_TRUNCATED: pl.Boolean(),
    S.ERROR: pl.String(),
}
CLAIMS_SCHEMA = pl.Schema({**_CLAIMS_TYPES, **S.USAGE_SCHEMA})
VERDICTS_SCHEMA = pl.Schema({**_VERDICTS_TYPES, **S.USAGE_SCHEMA, S.RESULT_SOURCE: pl.String(), **S.BILLED_SCHEMA,
                            S.JUDGE_SETTINGS: pl.String()})
#: A row's position in the day (raw_conversations' order), kept while shards are apart.
POSITION = "_fp_position"
#: What extracted_claims holds besides the row key: the claims, an extraction error, the extraction's usage.
CLAIM_COLUMNS = (S.CLAIMS, S.ERROR, *S.USAGE_COLUMNS)
#: What judged_claims holds besides the row key: the verdicts, the row's error, the verdicts' usage, where
#: the results came from, what this run paid for the row (both steps) and the judge's settings hash.
VERDICT_COLUMNS = (S.VERDICTS, S.CONTEXT_TRUNCATED, S.ERROR, *S.USAGE_COLUMNS, S.RESULT_SOURCE, *S.BILLED_COLUMNS,
                   S.JUDGE_SETTINGS)


@dataclass
class ShardResult:
    """What a shard step hands to ``combine``: where its rows are, and what it spent."""

    shard: int
    path: str
    rows: int
    stats: dict[str, Any] = field(default_factory=dict)


def judge_assets(
    partitions: dg.PartitionsDefinition[str], versioned: Callable[[str], str],
    step_tags: Mapping[str, str] | None = None,
) -> dg.AssetsDefinition:
    """The graph that judges a day; ``versioned`` adds the judge's identity to a code version; ``step_tags``
    go on the judge steps (``dagster-celery/queue``: the Celery queue they are sent to)."""

    @dg.op(ins={"after": dg.In(dg.Nothing)}, out=dg.DynamicOut(int, io_manager_key=STEP_IO))
    def shard_plan(judge: JudgeResource) -> Iterator[dg.DynamicOutput[int]]:
        for shard in range(judge.shards):
            yield dg.DynamicOutput(shard, mapping_key=f"shard_{shard}")

    @dg.op(pool=LLM_POOL, out=dg.Out(io_manager_key=STEP_IO), tags=dict(step_tags or {}))
    def judge_shard(
        context: dg.OpExecutionContext, shard: int, judge: JudgeResource, scoring: ScoringResource,
        warehouse: WarehouseResource,
    ) -> ShardResult:
        return judge_one_shard(context, shard, judge, scoring, warehouse)

    @dg.op(out={CLAIMS: dg.Out(dg.Nothing, is_required=True), VERDICTS: dg.Out(dg.Nothing, is_required=True)})
    def combine(context: dg.OpExecutionContext, results: list[ShardResult], warehouse: WarehouseResource,
                judge: JudgeResource) -> Iterator[dg.Output[None]]:
        yield from combine_shards(context, results, warehouse, judge)

    @dg.graph_multi_asset(
        outs={
            CLAIMS: dg.AssetOut(
                code_version=versioned(CLAIMS_REVISION),
                kinds={"parquet", "llm"},
                description="Step a: the atomic claims of every answer (one LLM extraction per answer, packed into "
                "few requests; shared by both scorers), with what the extraction cost: the row key, the claims, "
                "an extraction error and the extraction's usage. Empty answers have no claims and cost nothing.",
            ),
            VERDICTS: dg.AssetOut(
                code_version=versioned(VERDICTS_REVISION),
                kinds={"parquet", "llm"},
                description="Step b: a verdict for every claim against the answer's context only (supported / "
                "contradicted / unsupported, hedging, reason, evidence): the row key, the verdicts, the row's "
                "error, the verdicts' usage, where the results came from and what this run paid for the row.",
            ),
        },
        ins={RAW: dg.AssetIn(RAW, dagster_type=dg.Nothing)},
        group_name=GROUP,
        partitions_def=partitions,
        can_subset=False,
    )
    def claims_and_verdicts(raw_conversations: None) -> Any:
        return combine(shard_plan(after=raw_conversations).map(judge_shard).collect())

    return claims_and_verdicts


def shard_of(frame: pl.DataFrame, shards: int) -> pl.Series:
    """Each row's shard: a hash of its question and answer, so identical contents share a shard."""
    hashed = pl.struct(pl.col(S.QUESTION).fill_null(""), pl.col(S.ANSWER).fill_null("")).hash(seed=7)
    return frame.select((hashed % shards).cast(pl.Int32)).to_series()


def _shard_rows(
    warehouse: WarehouseResource, day: str, config: ScoringConfig, shard: int, shards: int
) -> Iterator[pl.DataFrame]:
    """This shard's rows of the day, prepared (judged columns rebuilt where the raw table does not keep
    them), with their position in the day, chunk by chunk."""
    offset = 0
    for batch in warehouse.batches(RAW, day, config.chunk_rows):
        frame = with_internals(batch, config).with_columns(
            pl.int_range(offset, offset + batch.height, dtype=pl.Int64).alias(POSITION)
        )
        offset += batch.height
        if shards > 1:
            frame = frame.filter(shard_of(frame, shards) == shard)
        yield frame


def judge_one_shard(
    context: dg.OpExecutionContext, shard: int, judge: JudgeResource, scoring: ScoringResource,
    warehouse: WarehouseResource,
) -> ShardResult:
    day = context.partition_key
    config = scoring.config()
    shards = judge.shards
    total = warehouse.rows(RAW, day)
    staging = warehouse.staging(context.run_id, day, f"shard-{shard}.parquet")
    # Batch mode reports the state of the step's batches while it waits.
    made = judge.make(warehouse.judge_store(), report=context.log.info,
                      remote_warehouse=warehouse.place().remote, receiving=_receiving(context, shard))
    progress = _progress(context, total if shards == 1 else total / shards, shard)
    sample = day_sample(warehouse, day, config)

    async def run() -> int:
        written = 0
        async with judge_run(made, lambda: _shard_rows(warehouse, day, config, shard, shards), config, prepared=True,
                             sample=sample, progress=progress) as judged_chunks:
            with staging.writer() as out:
                async for judged in judged_chunks:
                    out.write(_shard_columns(judged))
                    written += judged.height
        return written

    written = asyncio.run(run())
    return ShardResult(shard, staging.place.uri, written, asdict(made.stats()))


def day_sample(warehouse: WarehouseResource, day: str, config: ScoringConfig) -> Sample:
    """The rows of ``day`` that are judged. Every shard plans it from the whole day, so the shards agree: a
    cap per model (``sample_max_rows``) reads the day's row keys and models first, nothing else."""
    if config.sample_max_rows is None:
        return sample_of(config)
    present = warehouse.table_schema(RAW, day).names()
    columns = [c for c in (S.ROW_KEY, config.columns.model) if c in present]
    return sample_of(config, warehouse.batches(RAW, day, config.chunk_rows, columns=columns))


def _shard_columns(judged: pl.DataFrame) -> pl.DataFrame:
    """A judged chunk as a shard keeps it: position, row key, and both tables' own columns."""
    extraction_error = pl.when(pl.col(S.CLAIMS).is_null()).then(pl.col(S.ERROR)).otherwise(None)
    return judged.select(
        POSITION, S.ROW_KEY, S.CLAIMS, extraction_error.alias("_x_error"), *X_USAGE,
        S.VERDICTS, S.CONTEXT_TRUNCATED, S.ERROR, *V_USAGE, S.RESULT_SOURCE, *S.BILLED_COLUMNS, S.JUDGE_SETTINGS,
    )


def _claims(part: pl.DataFrame) -> pl.DataFrame:
    return part.select(
        S.ROW_KEY, S.CLAIMS, pl.col("_x_error").alias(S.ERROR),
        *[pl.col(x).alias(c) for x, c in zip(X_USAGE, S.USAGE_COLUMNS, strict=True)],
    )


def _verdicts(part: pl.DataFrame) -> pl.DataFrame:
    return part.select(
        S.ROW_KEY, S.VERDICTS, S.CONTEXT_TRUNCATED, S.ERROR,
        *[pl.col(v).alias(c) for v, c in zip(V_USAGE, S.USAGE_COLUMNS, strict=True)],
        S.RESULT_SOURCE, *S.BILLED_COLUMNS, S.JUDGE_SETTINGS,
    )


def combine_shards(
    context: dg.OpExecutionContext, results: list[ShardResult], warehouse: WarehouseResource, judge: JudgeResource
) -> Iterator[dg.Output[None]]:
    """The shards merged back into the day's order, written as the two tables; the staging files go."""
    day = context.partition_key
    results = sorted(results, key=lambda r: r.shard)
    chunk = 10_000
    rows = 0
    claims = 0
    extraction_errors = row_errors = truncated = skipped = 0
    with (warehouse.writer(CLAIMS, day, empty=CLAIMS_SCHEMA) as claim_out,
          warehouse.writer(VERDICTS, day, empty=VERDICTS_SCHEMA) as verdict_out):
        for part in _merged(warehouse, [r.path for r in results], chunk):
            claim_out.write(_claims(part))
            verdict_out.write(_verdicts(part))
            rows += part.height
            claims += int(part.get_column(S.CLAIMS).list.len().sum() or 0)
            capped = part.get_column(S.RESULT_SOURCE) == S.SOURCE_SKIPPED  # not errors: the spend cap
            skipped += int(capped.sum())
            extraction_errors += int((part.get_column("_x_error").is_not_null() & ~capped).sum())
            row_errors += int((part.get_column(S.ERROR).is_not_null() & ~capped).sum())
            truncated += int(part.get_column(S.CONTEXT_TRUNCATED).sum() or 0)
    expected = warehouse.rows(RAW, day)
    if rows != expected:  # a shard that lost or invented rows is a bug, never a row outcome
        raise RuntimeError(f"the shards of {day} hold {rows} rows, raw_conversations {expected}")
    for result in results:
        warehouse.staged(result.path).delete()
    stats = _summed([JudgeStats(**r.stats) for r in results])
    model, prompt = judge.identity()
    yield dg.Output(None, output_name=CLAIMS, metadata={
        **table_metadata(warehouse.table_schema(CLAIMS, day), CLAIMS, rows),
        "path": dg.MetadataValue.path(warehouse.location(CLAIMS, day)),
        **version_metadata(warehouse.format_name(), claim_out.committed),
        "judge_model": model,
        "prompt_version": prompt,
        "claims": claims,
        "error_rows": extraction_errors,
        "skipped_rows": skipped,
        "shards": len(results),
        **{f"extraction_{k}": v for k, v in usage_totals(warehouse.scan(CLAIMS, [day])).items()},
    })
    yield dg.Output(None, output_name=VERDICTS, metadata={
        **table_metadata(warehouse.table_schema(VERDICTS, day), VERDICTS, rows),
        "path": dg.MetadataValue.path(warehouse.location(VERDICTS, day)),
        **version_metadata(warehouse.format_name(), verdict_out.committed),
        **judge_metadata(stats, model, prompt),
        "error_rows": row_errors,
        "skipped_rows": skipped,
        "context_truncated_rows": truncated,
        "shards": len(results),
    })


def _merged(warehouse: WarehouseResource, paths: list[str], chunk: int) -> Iterator[pl.DataFrame]:
    """The shards' rows in the day's order, ``chunk`` positions at a time. Each shard is in position order,
    so a window of positions takes a prefix of every shard: memory stays at a window per shard."""
    streams = [warehouse.staged(path).batches(chunk) for path in paths]
    buffers = [pl.DataFrame() for _ in paths]
    done = [False] * len(paths)
    low = 0
    while True:
        high = low + chunk
        parts = []
        for k, stream in enumerate(streams):
            while not done[k] and (buffers[k].is_empty() or buffers[k].get_column(POSITION)[-1] < high):
                batch = next(stream, None)
                if batch is None:
                    done[k] = True
                else:
                    buffers[k] = batch if buffers[k].is_empty() else pl.concat([buffers[k], batch])
            if not buffers[k].is_empty():
                inside = buffers[k].get_column(POSITION) < high
                parts.append(buffers[k].filter(inside))
                buffers[k] = buffers[k].filter(~inside)
        parts = [p for p in parts if p.height]
        if not parts and all(done) and all(b.is_empty() for b in buffers):
            return
        if parts:
            yield pl.concat(parts).sort(POSITION)
        low = high


def _summed(stats: list[JudgeStats]) -> JudgeStats:
    return sum(stats, JudgeStats())


#: Seconds between two log lines of reply tokens arriving: a slow server's long pack shows in the run's log.
RECEIVING_LOG_S: Final = 60.0


def _receiving(context: dg.OpExecutionContext, shard: int) -> Callable[[int], None]:
    """Logs, at most once a minute, the reply tokens that arrived on streamed requests (``stream``)."""
    seen = [0, 0, time.monotonic()]  # tokens in all, tokens at the last log line, when it was written

    def heard(tokens: int) -> None:
        seen[0] += tokens
        now = time.monotonic()
        if now - seen[2] >= RECEIVING_LOG_S:
            rate = (seen[0] - seen[1]) / (now - seen[2])
            seen[1], seen[2] = seen[0], now
            context.log.info(f"claims and verdicts, shard {shard}: receiving replies, {seen[0]:,} tokens so far "
                             f"({rate:.1f} a second since the last such line)")

    return heard


def _progress(context: dg.OpExecutionContext, total: float, shard: int) -> RowProgress:
    """Logs every tenth of the way: the UI shows how far a long LLM step is."""
    done = [0.0, 0.0]  # rows finished (each row counts half per LLM step), rows at the last log line

    def report(rows: float) -> None:
        done[0] += rows
        if total and done[0] - done[1] >= total / 10:
            done[1] = done[0]
            context.log.info(f"claims and verdicts, shard {shard}: {min(done[0], total):.0f} of about {total:.0f} rows")

    return report

