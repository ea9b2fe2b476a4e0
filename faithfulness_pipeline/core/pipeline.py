"""The scoring steps composed: prepare -> claims and verdicts (``core.flow``) -> scores, chunk by chunk.

Each step is a function from a polars frame to a polars frame with more columns, so the Dagster assets can
materialise every stage and the CLI can stream a warehouse-sized table through all of them in bounded
chunks. No step ever drops a row: a row the judge could not handle gets ``status = "error"`` and a reason.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.combine import union_schema
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.core.flow import RowProgress, judge_chunk, overlap_rows, row_frame
from faithfulness_pipeline.core.normalize import KeyRegistry, prepare
from faithfulness_pipeline.core.port import Judge, Prepaying
from faithfulness_pipeline.core.reasons import add_reasons
from faithfulness_pipeline.core.scoring import add_counts_and_scores, published_verdicts


def score_step(
    df: pl.DataFrame,
    config: ScoringConfig,
    *,
    judge_model: str,
    prompt_version: str,
    scored_at: datetime | None = None,
) -> pl.DataFrame:
    """The scored table (SPEC §4) from the output of :func:`verdict_step`: passthrough columns, then ours."""
    scored_at = scored_at or datetime.now(UTC)
    df = add_counts_and_scores(df, config)
    df = add_reasons(df.with_columns(published_verdicts(df)))
    df = df.with_columns(
        pl.col(S.CLAIMS).alias("claims"),
        pl.when(pl.col(S.ERROR).is_null()).then(pl.lit(S.STATUS_OK)).otherwise(pl.lit(S.STATUS_ERROR)).alias("status"),
        pl.col(S.ERROR).alias("error"),
        pl.lit(judge_model, dtype=pl.String).alias("judge_model"),
        pl.lit(prompt_version, dtype=pl.String).alias("prompt_version"),
        pl.lit(scored_at, dtype=pl.Datetime("us", "UTC")).alias("scored_at"),
    )
    ours = set(S.SCORED_COLUMNS) | set(S.INTERNAL_COLUMNS)
    passthrough = [c for c in df.columns if c not in ours]
    return df.select(
        *passthrough, *[pl.col(name).cast(dtype) for name, dtype in S.SCORED_COLUMNS.items()]
    )


def empty_scored_frame(input_schema: Mapping[str, pl.DataType], config: ScoringConfig) -> pl.DataFrame:
    """The scored table of an empty input: no rows, the full schema (SPEC §8)."""
    prepared = prepare(pl.DataFrame(schema=dict(input_schema)), config)
    extracted = prepared.with_columns(
        pl.lit(None, dtype=pl.List(pl.String)).alias(S.CLAIMS),
        pl.lit(None, dtype=pl.String).alias(S.ERROR),
        pl.lit(None, dtype=pl.List(S.RAW_VERDICT_STRUCT)).alias(S.VERDICTS),
        pl.lit(None, dtype=pl.Boolean).alias(S.CONTEXT_TRUNCATED),
        *[pl.lit(None, dtype=d).alias(n) for n, d in {**S.USAGE_SCHEMA, **S.BILLED_SCHEMA}.items()],
        pl.lit(None, dtype=pl.String).alias(S.RESULT_SOURCE),
    )
    return score_step(extracted, config, judge_model="", prompt_version="")


def file_error(path: str, exc: InputError) -> InputError:
    """An input error of one file among several, naming the file."""
    return InputError(f"input file {path!r} cannot be scored: {exc}")


def scored_schema(schemas: Sequence[tuple[str, Mapping[str, pl.DataType]]], config: ScoringConfig) -> pl.Schema:
    """The scored table's columns for input files of these ``(file, schema)`` pairs, each file normalised on
    its own (flat and chat files may be mixed). Validates every file's columns, naming the file, before a
    row is read."""
    per_file = []
    for path, schema in schemas:
        try:
            per_file.append((path, empty_scored_frame(schema, config).schema))
        except InputError as exc:
            raise file_error(path, exc) from None
    return union_schema(per_file, trailing=list(S.SCORED_COLUMNS))


async def score_chunks(
    chunks: Iterable[pl.DataFrame],
    judge: Judge,
    config: ScoringConfig,
    progress: RowProgress | None = None,
) -> AsyncIterator[pl.DataFrame]:
    """Scores an input stream chunk by chunk; keys are checked for duplicates across the whole stream.

    With a judge that waits on requests (``core.judge.Overlapping``), the next chunk is prepared and its
    calls start while the current one is finishing: two chunks in flight at most, yielded in input order.
    A judge that waits on its own CPU (the offline judge) gets one chunk at a time.
    """
    registry = KeyRegistry()
    scored_at = datetime.now(UTC)

    def scored(df: pl.DataFrame) -> pl.DataFrame:
        return score_step(
            df, config, judge_model=judge.model_name, prompt_version=judge.prompt_version, scored_at=scored_at
        )

    if overlap_rows(judge) is None:
        for chunk in chunks:
            yield scored(await judge_chunk(prepare(chunk, config, registry), judge, progress))
        return

    async def run(prepared: pl.DataFrame) -> pl.DataFrame:
        judged = await judge_chunk(prepared, judge, progress)
        return await asyncio.to_thread(scored, judged)

    stream = iter(chunks)

    async def next_ready() -> pl.DataFrame | None:
        # Reading and preparing a chunk (10-30 ms) on a worker thread leaves the event loop free to hand
        # the chunk in flight on to its next stage meanwhile.
        return await asyncio.to_thread(_next_prepared, stream, config, registry)

    async for done in _two_in_flight(next_ready, run):
        yield done


async def judge_frame(
    df: pl.DataFrame, judge: Judge, chunk_rows: int, progress: RowProgress | None = None, *, split_usage: bool = False
) -> pl.DataFrame:
    """A prepared table with its claims, verdicts and usage (``core.flow.judge_chunk``), judged in chunks
    of ``chunk_rows`` rows, two in flight with an overlapping judge. ``split_usage`` keeps the extraction
    and verdict usage apart (``x_*`` / ``v_*``) instead of adding them up."""
    await prepay(judge, lambda: chunks_of(df, chunk_rows), None)
    stream = iter(chunks_of(df, chunk_rows))

    async def run(chunk: pl.DataFrame) -> pl.DataFrame:
        return await judge_chunk(chunk, judge, progress, split_usage=split_usage)

    if overlap_rows(judge) is None:
        parts = [await run(chunk) for chunk in stream]
    else:

        async def next_ready() -> pl.DataFrame | None:
            return next(stream, None)

        parts = [part async for part in _two_in_flight(next_ready, run)]
    return pl.concat(parts, how="vertical")


async def prepay(
    judge: Judge, chunks: Callable[[], Iterable[pl.DataFrame]], config: ScoringConfig | None
) -> None:
    """Lets a judge that answers a whole run in bulk (``core.judge.Prepaying``: provider batch jobs) obtain
    its results before the run is scored; any other judge is left alone. ``chunks`` reads the run's input
    again each time it is called; ``config`` None: its chunks are prepared already."""
    if not isinstance(judge, Prepaying):
        return

    def rows() -> Iterator[pl.DataFrame]:
        registry = KeyRegistry()
        for chunk in chunks():
            yield row_frame(chunk if config is None else prepare(chunk, config, registry))

    await judge.prepay(rows)


async def _two_in_flight(
    next_ready: Callable[[], Awaitable[pl.DataFrame | None]],
    run: Callable[[pl.DataFrame], Coroutine[Any, Any, pl.DataFrame]],
) -> AsyncIterator[pl.DataFrame]:
    """``run`` over each chunk ``next_ready`` gives, the next one started before the current one is yielded;
    results in input order. The task in flight is cancelled when the consumer stops early or a chunk fails."""
    pending: asyncio.Task[pl.DataFrame] | None = None
    try:
        while True:
            try:
                ready = await next_ready()
            except Exception:
                # A chunk that cannot be read or prepared (a duplicate key) fails the run where it did
                # before: after the chunks ahead of it have been yielded.
                if pending is not None:
                    done, pending = pending, None
                    yield await done
                raise
            if ready is None:
                break
            task = asyncio.create_task(run(ready))
            if pending is not None:
                done, pending = pending, None
                yield await done
            pending = task
        if pending is not None:
            done, pending = pending, None
            yield await done
    finally:
        if pending is not None:  # no orphan requests
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending


def _next_prepared(
    stream: Iterator[pl.DataFrame], config: ScoringConfig, registry: KeyRegistry
) -> pl.DataFrame | None:
    """The next chunk prepared, or None at the end. One call at a time: chunks are read in order."""
    piece = next(stream, None)
    return None if piece is None else prepare(piece, config, registry)


def chunks_of(df: pl.DataFrame, rows: int) -> Iterable[pl.DataFrame]:
    """Slices of at most ``rows`` rows; an empty table gives one empty slice so its schema flows through."""
    for offset in range(0, max(df.height, 1), rows):
        yield df.slice(offset, rows)


async def score_frame_async(
    df: pl.DataFrame, judge: Judge, config: ScoringConfig, progress: RowProgress | None = None
) -> pl.DataFrame:
    """Scores a whole in-memory table. The caller owns the judge (and closes it)."""
    await prepay(judge, lambda: chunks_of(df, config.chunk_rows), config)
    parts = [part async for part in score_chunks(chunks_of(df, config.chunk_rows), judge, config, progress)]
    return pl.concat(parts, how="vertical")
