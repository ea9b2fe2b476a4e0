"""The scoring steps composed: prepare -> claims and verdicts (``core.flow``) -> scores, chunk by chunk.

Each step is a function from a polars frame to a polars frame with more columns, so the Dagster assets can
materialise every stage and the CLI can stream a warehouse-sized table through all of them in bounded
chunks. No step ever drops a row: a row the judge could not handle gets ``status = "error"`` and a reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.combine import union_schema
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.errors import ConfigError, InputError
from faithfulness_pipeline.core.flow import RowProgress, Rows, judge_chunk, row_frame, summed_usage
from faithfulness_pipeline.core.keys import KeyRegistry
from faithfulness_pipeline.core.normalize import prepare
from faithfulness_pipeline.core.port import Judge, Judging
from faithfulness_pipeline.core.reasons import add_reasons
from faithfulness_pipeline.core.sampling import EVERY_ROW, Sample, plan_sample
from faithfulness_pipeline.core.scoring import add_counts_and_scores, published_verdicts

T = TypeVar("T")
U = TypeVar("U")

#: Rows of a chunk that a judge whose calls overlap works on at once, two such slices in flight (the
#: next one's calls start while the current one finishes). What the judge holds for a row in flight (its
#: items and prompts, then its claims and verdicts as Python objects) is many times the row's own size, so
#: a step's memory follows this number rather than the chunk's; slices are small enough for that to stay
#: low and large enough (hundreds of requests of typical rows) to keep every request slot busy.
SLICE_ROWS: Final = 2_500


def score_step(
    df: pl.DataFrame,
    config: ScoringConfig,
    *,
    judge_model: str,
    prompt_version: str,
    scored_at: datetime | None = None,
    scoring_run_id: str | None = None,
) -> pl.DataFrame:
    """The scored table (SPEC §4) from the output of :func:`verdict_step`: passthrough columns, then ours."""
    scored_at = scored_at or datetime.now(UTC)
    if S.NOTHING_TO_JUDGE in df.columns:  # the source said why the row holds nothing to judge: an error, not a 0
        df = df.with_columns(pl.coalesce(pl.col(S.ERROR), pl.col(S.NOTHING_TO_JUDGE).cast(pl.String)).alias(S.ERROR))
    df = add_counts_and_scores(df, config)
    df = add_reasons(df.with_columns(published_verdicts(df)))
    df = df.with_columns(
        pl.col(S.CLAIMS).alias("claims"),
        pl.when(pl.col(S.RESULT_SOURCE) == S.SOURCE_NOT_SAMPLED).then(pl.lit(S.STATUS_NOT_SAMPLED))
        .when(pl.col(S.RESULT_SOURCE) == S.SOURCE_SKIPPED).then(pl.lit(S.STATUS_SKIPPED))
        .when(pl.col(S.ERROR).is_null()).then(pl.lit(S.STATUS_OK)).otherwise(pl.lit(S.STATUS_ERROR)).alias("status"),
        pl.col(S.ERROR).alias("error"),
        pl.lit(judge_model, dtype=pl.String).alias("judge_model"),
        pl.lit(prompt_version, dtype=pl.String).alias("prompt_version"),
        pl.lit(scored_at, dtype=pl.Datetime("us", "UTC")).alias("scored_at"),
        pl.lit(scoring_run_id, dtype=pl.String).alias(S.SCORING_RUN_ID),
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
        pl.lit(None, dtype=pl.String).alias(S.JUDGE_SETTINGS),
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


def new_run_id() -> str:
    """A scoring run's id where no orchestrator names the run: random, 32 hex digits like a Dagster run id's."""
    return uuid.uuid4().hex


def sample_of(config: ScoringConfig, prepared: Iterable[pl.DataFrame] | None = None) -> Sample:
    """The rows a run under ``config`` judges (``core.sampling``). A cap per stratum (``sample_max_rows``)
    needs the run's ``prepared`` chunks, read once for their keys before anything is judged."""
    if config.sample_max_rows is None:
        return Sample(config.sample_rate, config.columns.model)
    if prepared is None:
        raise ConfigError("sample_max_rows needs the run's rows before they are scored: score_frame and the CLI "
                          "read them first; a caller of score_chunks passes sample=sample_of(config, chunks)")
    return plan_sample(prepared, config.sample_rate, config.sample_max_rows, config.columns.model)


async def score_chunks(
    chunks: Iterable[pl.DataFrame],
    judging: Judging | Judge,
    config: ScoringConfig,
    progress: RowProgress | None = None,
    run_id: str | None = None,
    sample: Sample | None = None,
) -> AsyncIterator[pl.DataFrame]:
    """Scores an input stream chunk by chunk; keys are checked for duplicates across the whole stream.

    Every row gets ``run_id`` as its ``scoring_run_id`` (a new id when None: one per stream). Rows outside
    ``sample`` (by default ``config``'s rate, uncapped) are not judged (``core.sampling``).

    With calls that overlap (``Judging.overlap_rows``), a chunk is judged in slices (:data:`SLICE_ROWS`),
    the next one's calls starting while the current one is finishing: two slices in flight at most, the
    next chunk prepared meanwhile, results yielded chunk by chunk in input order. A judge that waits on its
    own CPU (the offline judge) gets one chunk at a time.
    """
    judging = Judging.of(judging)
    judge = judging.judge
    sample = sample if sample is not None else sample_of(config)
    registry = KeyRegistry()
    scored_at = datetime.now(UTC)
    run_id = run_id or new_run_id()
    overlap = judging.overlap_rows is not None
    stream = iter(chunks)

    def scored(df: pl.DataFrame) -> pl.DataFrame:
        return score_step(
            summed_usage(df), config, judge_model=judge.model_name, prompt_version=judge.prompt_version,
            scored_at=scored_at, scoring_run_id=run_id,
        )

    def next_prepared() -> pl.DataFrame | None:
        piece = next(stream, None)
        return None if piece is None else prepare(piece, config, registry)

    async def run(prepared: pl.DataFrame) -> pl.DataFrame:
        judged = await judge_chunk(prepared, judging, progress, sample)
        # Scoring a chunk on a worker thread lets the chunk in flight be handed on meanwhile.
        return await asyncio.to_thread(scored, judged) if overlap else scored(judged)

    async for done in _in_order(next_prepared, run, overlap, threaded=True):
        yield done


async def judge_chunks(
    chunks: Iterable[pl.DataFrame], judging: Judging | Judge, progress: RowProgress | None = None,
    sample: Sample = EVERY_ROW,
) -> AsyncIterator[pl.DataFrame]:
    """Prepared chunks with their claims, verdicts and usage (``core.flow.judge_chunk``: extraction and
    verdict usage apart; rows outside ``sample`` not judged), in input order, two in flight when calls
    overlap (reading the next chunk on a worker thread: it may come from a file)."""
    judging = Judging.of(judging)
    stream = iter(chunks)

    async def run(chunk: pl.DataFrame) -> pl.DataFrame:
        return await judge_chunk(chunk, judging, progress, sample)

    async for done in _in_order(lambda: next(stream, None), run, judging.overlap_rows is not None, threaded=True):
        yield done


async def judge_frame(
    df: pl.DataFrame, judging: Judging | Judge, chunk_rows: int, progress: RowProgress | None = None
) -> pl.DataFrame:
    """A prepared in-memory table judged in chunks of ``chunk_rows`` rows (:func:`judge_chunks`)."""
    parts = [part async for part in judge_chunks(chunks_of(df, chunk_rows), judging, progress)]
    return pl.concat(parts, how="vertical")


def prepared_chunks(chunks: Iterable[pl.DataFrame], config: ScoringConfig) -> Iterator[pl.DataFrame]:
    """``chunks`` prepared as the scoring pass prepares them, keys checked across the whole stream."""
    registry = KeyRegistry()
    for chunk in chunks:
        yield prepare(chunk, config, registry)


def check_inputs(chunks: Iterable[pl.DataFrame], config: ScoringConfig) -> int:
    """Every check the input rows alone allow (readable, valid UTF-8, keys present and unique across every
    file, columns of the right types), made by preparing every chunk as the scoring pass will and keeping
    nothing: a run that pays per request makes them before its first request, so a problem in the last file
    costs nothing. A context hook is not called (it is code, not input: the scoring pass calls it once a
    row, and the row key never depends on it). Returns the number of rows to judge."""
    return sum(frame.height for frame in prepared_chunks(chunks, replace(config, context_hook=None)))


def rows_of(
    chunks: Callable[[], Iterable[pl.DataFrame]], config: ScoringConfig | None, sample: Sample = EVERY_ROW
) -> Rows:
    """The run's rows in ``sample`` (``core.flow.ROW_COLUMNS`` frames) for a bulk judge's prepay, read from
    ``chunks`` anew each time (``config`` None: the chunks are prepared already)."""

    def rows() -> Iterator[pl.DataFrame]:
        frames = chunks() if config is None else prepared_chunks(chunks(), config)
        for frame in frames:
            yield row_frame(frame, sample)

    return rows


async def _in_order(
    next_chunk: Callable[[], pl.DataFrame | None],
    run: Callable[[pl.DataFrame], Coroutine[Any, Any, pl.DataFrame]],
    overlap: bool,
    *,
    threaded: bool = False,
) -> AsyncIterator[pl.DataFrame]:
    """``run`` over each chunk ``next_chunk`` gives (None: the end), results in input order, a chunk's
    results together: one chunk at a time, or (``overlap``) in slices of :data:`SLICE_ROWS` rows with two
    in flight, the next one read (on a worker thread when ``threaded``: reading and preparing a chunk takes
    10-30 ms) while the current one is finishing."""
    if not overlap:
        while (chunk := next_chunk()) is not None:
            yield await run(chunk)
        return
    slices = _slices(next_chunk, SLICE_ROWS)

    async def next_ready() -> tuple[pl.DataFrame, bool] | None:
        return await asyncio.to_thread(next, slices, None) if threaded else next(slices, None)

    async def run_slice(piece: tuple[pl.DataFrame, bool]) -> tuple[pl.DataFrame, bool]:
        return await run(piece[0]), piece[1]

    parts: list[pl.DataFrame] = []
    async for done, last in _two_in_flight(next_ready, run_slice):
        parts.append(done)
        if last:
            # Slices of one chunk share its input columns' types; relaxed for a column a slice holds only
            # nulls of.
            yield parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical_relaxed")
            parts = []


def _slices(next_chunk: Callable[[], pl.DataFrame | None], rows: int) -> Iterator[tuple[pl.DataFrame, bool]]:
    """The :func:`chunks_of` slices of each chunk ``next_chunk`` gives, each with whether it is its chunk's last."""
    while (chunk := next_chunk()) is not None:
        pieces = list(chunks_of(chunk, rows))
        for at, piece in enumerate(pieces):
            yield piece, at == len(pieces) - 1


async def _two_in_flight(
    next_ready: Callable[[], Awaitable[T | None]],
    run: Callable[[T], Coroutine[Any, Any, U]],
) -> AsyncIterator[U]:
    """``run`` over each piece ``next_ready`` gives, the next one started before the current one is yielded;
    results in input order. The task in flight is cancelled when the consumer stops early or a piece fails."""
    pending: asyncio.Task[U] | None = None
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


def chunks_of(df: pl.DataFrame, rows: int) -> Iterable[pl.DataFrame]:
    """Slices of at most ``rows`` rows; an empty table gives one empty slice so its schema flows through."""
    for offset in range(0, max(df.height, 1), rows):
        yield df.slice(offset, rows)
