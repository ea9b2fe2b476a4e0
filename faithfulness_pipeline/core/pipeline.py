"""The scoring steps composed: prepare -> claims -> verdicts -> scores, chunk by chunk.

Each step is a function from a polars frame to a polars frame with more columns, so the Dagster assets can
materialise every stage and the CLI can stream a warehouse-sized table through all of them in bounded
chunks. No step ever drops a row: a row the judge could not handle gets ``status = "error"`` and a reason.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from itertools import accumulate
from typing import Any

import polars as pl
import pyarrow as pa

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.judge import (
    NO_USAGE,
    ClaimVerdict,
    ExtractItem,
    Judge,
    Overlapping,
    StoredColumns,
    StoredRows,
    Usage,
    VerdictItem,
)
from faithfulness_pipeline.core.keys import is_blank
from faithfulness_pipeline.core.normalize import KeyRegistry, prepare
from faithfulness_pipeline.core.reasons import add_reasons
from faithfulness_pipeline.core.scoring import add_counts_and_scores, published_verdicts

#: Receives how many rows (fractions allowed: each row passes two LLM steps) just advanced.
RowProgress = Callable[[float], None]

NO_CONTEXT_REASON = "No context was provided to check this claim against."

# Building nested columns through Arrow is an order of magnitude faster than from python lists of dicts.
_CLAIMS_ARROW = pa.large_list(pa.large_string())
_NO_CONTEXT_VERDICT = ClaimVerdict("unsupported", False, NO_CONTEXT_REASON, None)


def _nested(name: str, values: list[Any], arrow_type: pa.DataType) -> pl.Series:
    series = pl.Series(name, pa.array(values, type=arrow_type))
    return series


def _verdict_column(per_row: list[Sequence[ClaimVerdict] | None]) -> pl.Series:
    """``_fp_verdicts`` built field by field (flat arrays and offsets), not verdict by verdict."""
    flat = [v for verdicts in per_row if verdicts for v in verdicts]
    struct = pa.StructArray.from_arrays(
        [
            pa.array([v.verdict for v in flat], pa.large_string()),
            pa.array([v.speculative for v in flat], pa.bool_()),
            pa.array([v.reason for v in flat], pa.large_string()),
            pa.array([v.evidence for v in flat], pa.int32()),
        ],
        names=["verdict", "speculative", "reason", "evidence_index"],
    )
    offsets = pa.array(list(accumulate((len(v) if v else 0 for v in per_row), initial=0)), pa.int64())
    missing = pa.array([v is None for v in per_row], pa.bool_())
    return pl.Series(S.VERDICTS, pa.LargeListArray.from_arrays(offsets, struct, mask=missing))


def _usage_frame(usages: list[Usage]) -> dict[str, pl.Series]:
    return {
        "llm_calls": pl.Series([u.llm_calls for u in usages], dtype=pl.Float64),
        "prompt_tokens": pl.Series([u.prompt_tokens for u in usages], dtype=pl.Int64),
        "completion_tokens": pl.Series([u.completion_tokens for u in usages], dtype=pl.Int64),
        "cost_usd": pl.Series([u.cost_usd for u in usages], dtype=pl.Float64),
    }


def _add_usage(df: pl.DataFrame, usages: list[Usage]) -> pl.DataFrame:
    """Adds this step's usage to the row's running totals (a null cost stays null: unknown is not 0)."""
    new = _usage_frame(usages)
    if "llm_calls" not in df.columns:
        return df.with_columns(s.alias(name) for name, s in new.items())
    return df.with_columns(
        (pl.col(name) + s).alias(name) for name, s in new.items()
    )


def _half(progress: RowProgress | None) -> Callable[[int], None] | None:
    if progress is None:
        return None
    return lambda n: progress(n / 2)


async def extract_step(df: pl.DataFrame, judge: Judge, progress: RowProgress | None = None) -> pl.DataFrame:
    """Adds ``_fp_claims`` and ``_fp_error`` (plus usage). Empty or null answers cost no call: no claims."""
    keys = df.get_column(S.ROW_KEY).to_list()
    answers = df.get_column(S.ANSWER).to_list()
    questions = df.get_column(S.QUESTION).to_list()
    todo = [i for i, a in enumerate(answers) if a is not None and a.strip()]
    items = [ExtractItem(id=keys[i], answer=answers[i], question=questions[i]) for i in todo]
    if progress is not None and len(todo) < df.height:
        progress((df.height - len(todo)) / 2)
    results = await judge.extract_claims(items, _half(progress)) if items else []
    _check_ids("extract_claims", [it.id for it in items], [r.id for r in results])

    claims: list[list[str] | None] = [[] for _ in range(df.height)]
    errors: list[str | None] = [None] * df.height
    usages = [Usage() for _ in range(df.height)]
    for i, result in zip(todo, results, strict=True):
        claims[i] = list(result.claims) if result.claims is not None else None
        errors[i] = f"claim extraction failed: {result.error}" if result.error is not None else None
        usages[i] = result.usage
    out = df.with_columns(
        _nested(S.CLAIMS, claims, _CLAIMS_ARROW),
        pl.Series(S.ERROR, errors, dtype=pl.String),
    )
    return _add_usage(out, usages)


def _check_ids(step: str, sent: list[str], got: list[str]) -> None:
    # The port promises one result per item in order; a judge that breaks it is a bug, not a row error.
    if sent != got:
        raise RuntimeError(f"judge broke the port contract in {step}: results do not match items one to one")


async def verdict_step(df: pl.DataFrame, judge: Judge, progress: RowProgress | None = None) -> pl.DataFrame:
    """Adds ``_fp_verdicts`` and ``context_truncated`` (plus usage) to the output of :func:`extract_step`.

    Rows without claims or with an earlier error make no call; claims with an empty context are all
    ``unsupported`` without a call (SPEC §3b).
    """
    keys = df.get_column(S.ROW_KEY).to_list()
    claims = df.get_column(S.CLAIMS).to_list()
    contexts = df.get_column(S.CONTEXT).to_list()
    questions = df.get_column(S.QUESTION).to_list()
    errors = df.get_column(S.ERROR).to_list()

    verdicts: list[Sequence[ClaimVerdict] | None] = [None] * df.height
    truncated = [False] * df.height
    usages = [NO_USAGE] * df.height
    todo: list[int] = []
    for i in range(df.height):
        if errors[i] is not None:
            continue
        if not claims[i]:
            verdicts[i] = ()
        elif not contexts[i]:
            verdicts[i] = (_NO_CONTEXT_VERDICT,) * len(claims[i])
        else:
            todo.append(i)
    if progress is not None and len(todo) < df.height:
        progress((df.height - len(todo)) / 2)
    items = [
        VerdictItem(id=keys[i], claims=tuple(claims[i]), context=tuple(contexts[i]), question=questions[i])
        for i in todo
    ]
    results = await judge.judge_claims(items, _half(progress)) if items else []
    _check_ids("judge_claims", [it.id for it in items], [r.id for r in results])
    for i, result in zip(todo, results, strict=True):
        usages[i] = result.usage
        truncated[i] = result.context_truncated
        if result.verdicts is None or len(result.verdicts) != len(claims[i]):
            errors[i] = f"claim verdicts failed: {result.error or 'judge returned a wrong number of verdicts'}"
            continue
        verdicts[i] = result.verdicts
    out = df.with_columns(
        _verdict_column(verdicts),
        pl.Series(S.CONTEXT_TRUNCATED, truncated, dtype=pl.Boolean),
        pl.Series(S.ERROR, errors, dtype=pl.String),
    )
    return _add_usage(out, usages)


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
        *[pl.lit(None, dtype=d).alias(n) for n, d in S.USAGE_SCHEMA.items()],
    )
    return score_step(extracted, config, judge_model="", prompt_version="")


async def score_chunks(
    chunks: Iterable[pl.DataFrame],
    judge: Judge,
    config: ScoringConfig,
    progress: RowProgress | None = None,
) -> AsyncIterator[pl.DataFrame]:
    """Scores an input stream chunk by chunk; keys are checked for duplicates across the whole stream.

    With a judge that waits on requests (:class:`Overlapping`), the next chunk is prepared and its calls
    start while the current one is finishing: two chunks in flight at most, yielded in input order.
    """
    registry = KeyRegistry()
    scored_at = datetime.now(UTC)

    def scored(df: pl.DataFrame) -> pl.DataFrame:
        return score_step(
            df, config, judge_model=judge.model_name, prompt_version=judge.prompt_version, scored_at=scored_at
        )

    if not isinstance(judge, Overlapping):
        for chunk in chunks:
            prepared = prepare(chunk, config, registry)
            with_claims = await extract_step(prepared, judge, progress)
            yield scored(await verdict_step(with_claims, judge, progress))
        return

    async def run(prepared: pl.DataFrame) -> pl.DataFrame:
        judged = await judge_overlapped(prepared, judge, progress)
        return await asyncio.to_thread(scored, judged)

    pending: asyncio.Task[pl.DataFrame] | None = None
    stream = iter(chunks)
    try:
        while True:
            try:
                # Reading and preparing a chunk (10-30 ms) on a worker thread leaves the event loop free
                # to hand the chunk in flight on to its next stage meanwhile.
                ready = await asyncio.to_thread(_next_prepared, stream, config, registry)
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
        if pending is not None:  # the consumer stopped early or a chunk failed: no orphan requests
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending


def _next_prepared(
    stream: Iterator[pl.DataFrame], config: ScoringConfig, registry: KeyRegistry
) -> pl.DataFrame | None:
    """The next chunk prepared, or None at the end. One call at a time: chunks are read in order."""
    piece = next(stream, None)
    return None if piece is None else prepare(piece, config, registry)


async def judge_overlapped(df: pl.DataFrame, judge: Judge, progress: RowProgress | None = None) -> pl.DataFrame:
    """:func:`extract_step` then :func:`verdict_step` in one, the same columns row for row, with overlap.

    Answers are sent for extraction in calls of ``judge.overlap_rows``; each call's verdicts leave as soon
    as its claims are back, while later calls are still out. Items the judge can serve column-wise from
    its store (:class:`StoredRows`, :class:`StoredColumns`) never become Python objects; rows finished
    any other way are then kept whole in the store (:class:`StoredRows`) for the next run.
    """
    n = df.height
    work = df.select(
        pl.int_range(n, dtype=pl.Int64).alias("_i"), S.ROW_KEY, S.ANSWER, S.QUESTION, S.CONTEXT,
        is_blank(pl.col(S.ANSWER)).alias("_blank"),
    )
    # Off the event loop: hashing, lookups and decoding release the GIL for long stretches, so another
    # chunk's store lookup, scoring or preparation runs on the other core meanwhile.
    stored = await asyncio.to_thread(_stored_rows, work.filter(~pl.col("_blank")), judge)
    done_ids = stored.get_column("_i") if stored is not None else pl.Series("_i", [], dtype=pl.Int64)
    if progress is not None and done_ids.len():
        progress(float(done_ids.len()))
    kept = False  # whether every row came whole from the store: then there is nothing to keep
    if stored is not None and stored.height == n:
        found = stored.sort("_i")  # a warm re-run: nothing left to ask
        kept = bool(found.get_column(_WHOLE).all())
    else:
        rest = work.filter(~pl.col("_i").is_in(done_ids.implode())) if done_ids.len() else work
        fresh = (await _per_item_rows(rest, judge, progress)).with_columns(pl.lit(False).alias(_WHOLE))
        parts = [fresh] if stored is None else [fresh, stored.select(fresh.columns)]
        found = pl.concat(parts, how="vertical").sort("_i")
    if isinstance(judge, StoredRows) and not kept:
        await asyncio.to_thread(_keep_rows, work, found, judge)
    x_usage = [(found.get_column(f"x_{c}")).alias(c) for c in S.USAGE_COLUMNS]
    out = df.with_columns(found.get_column(S.CLAIMS), found.get_column(S.ERROR), *x_usage)
    return out.with_columns(
        found.get_column(S.VERDICTS),
        found.get_column(S.CONTEXT_TRUNCATED),
        *[(pl.col(c) + found.get_column(f"v_{c}")).alias(c) for c in S.USAGE_COLUMNS],
    )


#: True on rows served whole from the store (:class:`StoredRows`): those need not be kept again.
_WHOLE = "_whole"


def _stored_rows(sendable: pl.DataFrame, judge: object) -> pl.DataFrame | None:
    """The rows whose results are all in the judge's store, as finished result columns: whole rows
    first, then the rest step by step (claims, then verdicts of those claims)."""
    if sendable.height == 0:
        return None
    parts: list[pl.DataFrame] = []
    rest = sendable
    if isinstance(judge, StoredRows):
        rows = judge.stored_rows(
            sendable.get_column(S.ANSWER), sendable.get_column(S.QUESTION), sendable.get_column(S.CONTEXT)
        )
        if rows is not None:
            missing = rows.get_column("verdicts").is_null()
            whole = pl.concat([sendable.select("_i"), rows], how="horizontal").filter(~missing)
            parts.append(_result_columns(whole, whole=True))
            rest = sendable.filter(missing) if whole.height else sendable
    steps = _stored_steps(rest, judge)
    if steps is not None:
        parts.append(_result_columns(steps, whole=False))
    parts = [p for p in parts if p.height]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical")


def _result_columns(found: pl.DataFrame, *, whole: bool) -> pl.DataFrame:
    return found.select(
        "_i",
        pl.col("claims").alias(S.CLAIMS),
        pl.lit(None, dtype=pl.String).alias(S.ERROR),
        *[f"x_{c}" for c in S.USAGE_COLUMNS],
        pl.col("verdicts").alias(S.VERDICTS),
        pl.col("context_truncated").alias(S.CONTEXT_TRUNCATED),
        *[f"v_{c}" for c in S.USAGE_COLUMNS],
        pl.lit(whole).alias(_WHOLE),
    )


def _stored_steps(sendable: pl.DataFrame, judge: object) -> pl.DataFrame | None:
    """The rows whose claims and verdicts are both in the judge's store as step results."""
    if not isinstance(judge, StoredColumns) or sendable.height == 0:
        return None
    claims = judge.stored_claims(sendable.get_column(S.ANSWER), sendable.get_column(S.QUESTION))
    if claims is None:
        return None
    hit = pl.concat([sendable, claims.rename({c: f"x_{c}" for c in S.USAGE_COLUMNS})], how="horizontal").filter(
        pl.col("claims").list.len() > 0, pl.col(S.CONTEXT).list.len() > 0
    )
    if hit.height == 0:
        return None
    verdicts = judge.stored_verdicts(hit.get_column("claims"), hit.get_column(S.CONTEXT))
    if verdicts is None:
        return None
    both = pl.concat([hit, verdicts.rename({c: f"v_{c}" for c in S.USAGE_COLUMNS})], how="horizontal")
    return both.filter(pl.col("verdicts").is_not_null())


def _keep_rows(work: pl.DataFrame, found: pl.DataFrame, judge: StoredRows) -> None:
    """Hands the rows finished this run (both steps, judged against passages) to the store whole."""
    new = (
        ~found.get_column(_WHOLE)
        & found.get_column(S.ERROR).is_null()
        & found.get_column(S.VERDICTS).is_not_null()
        & (found.get_column(S.CLAIMS).list.len() > 0)
        & (work.get_column(S.CONTEXT).list.len() > 0)
    )
    if not new.any():
        return
    rows, results = work.filter(new), found.filter(new)
    judge.store_rows(
        rows.get_column(S.ANSWER),
        rows.get_column(S.QUESTION),
        rows.get_column(S.CONTEXT),
        results.select(
            pl.col(S.CLAIMS).alias("claims"),
            pl.col(S.VERDICTS).alias("verdicts"),
            pl.col(S.CONTEXT_TRUNCATED).alias("context_truncated"),
            *[f"x_{c}" for c in S.USAGE_COLUMNS],
            *[f"v_{c}" for c in S.USAGE_COLUMNS],
        ),
    )


async def _per_item_rows(rest: pl.DataFrame, judge: Judge, progress: RowProgress | None) -> pl.DataFrame:
    """The result columns of ``rest`` (in no particular row order) through the per-item port, extraction
    calls overlapping verdicts.

    Work that is not a request stays off the path of the first and the last one: passages become Python
    strings only when their call's verdicts are due, and each call's rows become a small result frame
    as soon as its verdicts are back, while later calls are still out.
    """
    size = max(1, judge.overlap_rows if isinstance(judge, Overlapping) else rest.height)
    n = rest.height
    row_ids = rest.get_column("_i")
    passages = rest.get_column(S.CONTEXT)
    keys = rest.get_column(S.ROW_KEY).to_list()
    answers = rest.get_column(S.ANSWER).to_list()
    questions = rest.get_column(S.QUESTION).to_list()
    blank = rest.get_column("_blank").to_list()

    claims: list[list[str] | None] = [[] for _ in range(n)]
    errors: list[str | None] = [None] * n
    x_usages = [Usage() for _ in range(n)]
    verdicts: list[Sequence[ClaimVerdict] | None] = [None] * n
    truncated = [False] * n
    v_usages = [NO_USAGE] * n
    parts: list[pl.DataFrame] = []
    half = _half(progress)

    def frame_of(rows: list[int]) -> pl.DataFrame:
        x = _usage_frame([x_usages[i] for i in rows])
        v = _usage_frame([v_usages[i] for i in rows])
        return pl.DataFrame(
            [
                row_ids.gather(rows),
                _nested(S.CLAIMS, [claims[i] for i in rows], _CLAIMS_ARROW),
                pl.Series(S.ERROR, [errors[i] for i in rows], dtype=pl.String),
                *[s.alias(f"x_{c}") for c, s in x.items()],
                _verdict_column([verdicts[i] for i in rows]),
                pl.Series(S.CONTEXT_TRUNCATED, [truncated[i] for i in rows], dtype=pl.Boolean),
                *[s.alias(f"v_{c}") for c, s in v.items()],
            ]
        )

    async def verdicts_of(rows: list[int]) -> None:
        with_claims = [i for i in rows if errors[i] is None and claims[i]]
        context = dict(zip(with_claims, passages.gather(with_claims).to_list(), strict=True)) if with_claims else {}
        todo: list[int] = []
        for i in rows:
            if errors[i] is not None:
                continue
            if not claims[i]:
                verdicts[i] = ()
            elif not context[i]:
                verdicts[i] = (_NO_CONTEXT_VERDICT,) * len(claims[i] or ())
            else:
                todo.append(i)
        if progress is not None and len(todo) < len(rows):
            progress((len(rows) - len(todo)) / 2)
        if todo:
            items = [
                VerdictItem(id=keys[i], claims=tuple(claims[i] or ()), context=tuple(context[i]), question=questions[i])
                for i in todo
            ]
            results = await judge.judge_claims(items, half)
            _check_ids("judge_claims", [it.id for it in items], [r.id for r in results])
            for i, result in zip(todo, results, strict=True):
                v_usages[i] = result.usage
                truncated[i] = result.context_truncated
                count = len(claims[i] or ())
                if result.verdicts is None or len(result.verdicts) != count:
                    errors[i] = f"claim verdicts failed: {result.error or 'judge returned a wrong number of verdicts'}"
                    continue
                verdicts[i] = result.verdicts
        parts.append(frame_of(rows))

    async def claims_then_verdicts(rows: list[int]) -> None:
        items = [ExtractItem(id=keys[i], answer=answers[i], question=questions[i]) for i in rows]
        results = await judge.extract_claims(items, half)
        _check_ids("extract_claims", [it.id for it in items], [r.id for r in results])
        for i, result in zip(rows, results, strict=True):
            claims[i] = list(result.claims) if result.claims is not None else None
            errors[i] = f"claim extraction failed: {result.error}" if result.error is not None else None
            x_usages[i] = result.usage
        await verdicts_of(rows)

    blank_rows = [i for i in range(n) if blank[i]]
    send = [i for i in range(n) if not blank[i]]
    if progress is not None and blank_rows:
        progress(len(blank_rows) / 2)
    async with asyncio.TaskGroup() as group:
        if blank_rows:
            group.create_task(verdicts_of(blank_rows))
        for start in range(0, len(send), size):
            group.create_task(claims_then_verdicts(send[start : start + size]))
    return pl.concat(parts, how="vertical") if parts else frame_of([])


def chunks_of(df: pl.DataFrame, rows: int) -> Iterable[pl.DataFrame]:
    """Slices of at most ``rows`` rows; an empty table gives one empty slice so its schema flows through."""
    for offset in range(0, max(df.height, 1), rows):
        yield df.slice(offset, rows)


async def score_frame_async(
    df: pl.DataFrame, judge: Judge, config: ScoringConfig, progress: RowProgress | None = None
) -> pl.DataFrame:
    """Scores a whole in-memory table. The caller owns the judge (and closes it)."""
    parts = [part async for part in score_chunks(chunks_of(df, config.chunk_rows), judge, config, progress)]
    return pl.concat(parts, how="vertical")
