"""The one claims -> verdicts flow: a chunk's rows through the row cache and the port, extraction
overlapping verdicts.

The CLI, the Python API and the Dagster assets all judge rows here. A chunk becomes a small frame of the
columns the judge needs (:data:`ROW_COLUMNS`). The row cache (``core.port.RowCache``: whole rows kept in
the result store) answers what it holds; the port answers the rest, item by item (:func:`judge_rows`), and
the rows it finished go back to the row cache. The results come back as :data:`RESULT_COLUMNS`, with
extraction and verdict usage apart (``x_*`` and ``v_*``; :func:`summed_usage` adds them up), and are put
back on the chunk by :func:`judge_chunk`. No row is ever dropped: a row the judge could not handle
carries its error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate
from typing import Any, Final, TypeAlias

import polars as pl
import pyarrow as pa

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.canonical import canonical, canonical_each
from faithfulness_pipeline.core.keys import is_blank
from faithfulness_pipeline.core.port import (
    NO_USAGE,
    ClaimVerdict,
    ExtractItem,
    ExtractResult,
    Hooks,
    Judge,
    Judging,
    ResultSource,
    Usage,
    VerdictItem,
    VerdictResult,
    billed_of,
    source_of,
)
from faithfulness_pipeline.core.sampling import EVERY_ROW, Sample

_LOG = logging.getLogger(__name__)

#: Receives how many rows (fractions allowed: each row passes two LLM steps) just advanced.
RowProgress = Callable[[float], None]

NO_CONTEXT_REASON: Final = "No context was provided to check this claim against."

#: Position of the row in its chunk: results come back in any order and are sorted by it.
INDEX: Final = "_i"
#: True where the answer is blank: no claims, no call.
BLANK: Final = "_blank"
#: What a judge is given of each row.
ROW_COLUMNS: Final = (INDEX, S.ROW_KEY, S.ANSWER, S.QUESTION, S.CONTEXT, BLANK)
#: Reads a run's rows (:data:`ROW_COLUMNS` frames, chunk by chunk) anew each time it is called.
Rows: TypeAlias = Callable[[], Iterable[pl.DataFrame]]
#: Usage of the extraction and of the verdicts of a row, kept apart until they are added up.
X_USAGE: Final = tuple(f"x_{c}" for c in S.USAGE_COLUMNS)
V_USAGE: Final = tuple(f"v_{c}" for c in S.USAGE_COLUMNS)
#: What a judge gives back for each row: results, what producing them cost (extraction and verdicts
#: apart), where they came from and what this run paid for them (both steps together).
RESULT_COLUMNS: Final = (
    INDEX, S.CLAIMS, S.ERROR, *X_USAGE, S.VERDICTS, S.CONTEXT_TRUNCATED, *V_USAGE, S.RESULT_SOURCE, *S.BILLED_COLUMNS,
)
#: The stronger source names the row: anything paid in this run makes it ``llm``, unless a step of it was
#: skipped (the spend cap): then the row has no result, whatever its other step cost.
_SOURCE_RANK: Final[dict[str, int]] = {"none": 0, "store": 1, "duplicate": 2, "offline": 3, "llm": 4, "skipped": 5}

# Building nested columns through Arrow (flat values and offsets) is an order of magnitude faster than
# polars building them from Python lists of lists or dicts.
_NO_CONTEXT_VERDICT: Final = ClaimVerdict("unsupported", False, NO_CONTEXT_REASON, None)


def row_frame(df: pl.DataFrame, sample: Sample = EVERY_ROW) -> pl.DataFrame:
    """The :data:`ROW_COLUMNS` of a prepared chunk's rows in ``sample`` (``core.sampling``; all of them by
    default): what a judge is given of it, its text in the canonical form (``core.canonical``), so that
    text that looks the same is judged, deduplicated and stored as one."""
    answer = canonical(pl.col(S.ANSWER))
    rows = df.select(
        pl.int_range(df.height, dtype=pl.Int64).alias(INDEX), S.ROW_KEY, answer.alias(S.ANSWER),
        canonical(pl.col(S.QUESTION)).alias(S.QUESTION), canonical_each(pl.col(S.CONTEXT)).alias(S.CONTEXT),
        is_blank(answer).alias(BLANK),
    )
    return rows if sample.everything else rows.filter(sample.selects(df))


def _unsampled(indexes: pl.Series) -> pl.DataFrame:
    """The :data:`RESULT_COLUMNS` of rows outside the sample: no claims, no verdicts, no error, nothing spent."""
    n = indexes.len()
    none = [NO_USAGE] * n
    return pl.DataFrame([
        indexes.alias(INDEX),
        pl.Series(S.CLAIMS, [None] * n, dtype=pl.List(pl.String)),
        pl.Series(S.ERROR, [None] * n, dtype=pl.String),
        *_usage_columns(none, X_USAGE),
        pl.Series(S.VERDICTS, [None] * n, dtype=pl.List(S.RAW_VERDICT_STRUCT)),
        pl.Series(S.CONTEXT_TRUNCATED, [False] * n, dtype=pl.Boolean),
        *_usage_columns(none, V_USAGE),
        pl.Series(S.RESULT_SOURCE, ["not_sampled"] * n, dtype=pl.String),
        *_usage_columns(none, S.BILLED_COLUMNS),
    ])


class _SafeProgress:
    """A progress callback that can never fail a row or the run: what it raises (a closed pipe under a
    progress bar, a bug in a notebook's callback) is logged once and the callback is not called again."""

    def __init__(self, progress: RowProgress) -> None:
        self._progress: RowProgress | None = progress

    def __call__(self, rows: float) -> None:
        if self._progress is None:
            return
        try:
            self._progress(rows)
        except Exception as exc:
            self._progress = None
            _LOG.warning("the progress callback failed (%s: %s): scoring goes on without it",
                         type(exc).__name__, str(exc)[:200])


def safe_progress(progress: RowProgress | None) -> RowProgress | None:
    """``progress`` made unable to raise (:class:`_SafeProgress`); None stays None."""
    if progress is None or isinstance(progress, _SafeProgress):
        return progress
    return _SafeProgress(progress)


async def judge_chunk(
    df: pl.DataFrame, judging: Judging, progress: RowProgress | None = None, sample: Sample = EVERY_ROW
) -> pl.DataFrame:
    """A prepared chunk with its claims, verdicts, truncation flag, error, usage (``x_*`` and ``v_*``), source
    and billed columns, row for row, and the judge's settings hash. Rows outside ``sample``
    (``core.sampling``) are not judged: their source is ``not_sampled``."""
    progress = safe_progress(progress)
    rows = row_frame(df, sample)
    unsampled = None
    if rows.height < df.height:
        left_out = pl.int_range(df.height, dtype=pl.Int64, eager=True).alias(INDEX)
        unsampled = _unsampled(left_out.filter(~left_out.is_in(rows.get_column(INDEX).implode())))
        if progress is not None:
            progress(float(unsampled.height))
    cache = judging.rows
    kept = None
    if cache is not None:
        kept = await asyncio.to_thread(cache.find, rows.filter(~pl.col(BLANK)))
    if kept is not None and progress is not None:
        progress(float(kept.height))
    if kept is not None and kept.height == rows.height:  # a warm re-run: nothing left to ask
        found = kept
    else:
        rest = rows if kept is None else rows.filter(~pl.col(INDEX).is_in(kept.get_column(INDEX).implode()))
        fresh = (await judge_rows(rest, judging.judge, progress, overlap=judging.overlap_rows)).sort(INDEX)
        if cache is not None:
            await asyncio.to_thread(cache.keep, rest, fresh)
        found = fresh if kept is None else pl.concat([fresh, kept.select(fresh.columns)], how="vertical")
    if unsampled is not None:
        found = pl.concat([found, unsampled.select(found.columns)], how="vertical")
    if found.height != df.height:  # a judge that loses or invents rows is a bug, never a row outcome
        raise RuntimeError(f"the judge returned {found.height} result rows for {df.height} rows")
    found = found.sort(INDEX)
    return df.with_columns([found.get_column(c) for c in RESULT_COLUMNS if c != INDEX]).with_columns(
        pl.lit(judging.settings_hash, dtype=pl.String).alias(S.JUDGE_SETTINGS)
    )


def summed_usage(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with the extraction and verdict usage (``x_*``, ``v_*``) added up into the usage columns."""
    return df.with_columns(
        (pl.col(x) + pl.col(v)).alias(c) for c, x, v in zip(S.USAGE_COLUMNS, X_USAGE, V_USAGE, strict=True)
    ).drop([*X_USAGE, *V_USAGE])


def extract_items(rows: pl.DataFrame) -> list[ExtractItem]:
    """What ``rows`` (:data:`ROW_COLUMNS`) ask of a judge's extraction: every answer that is not blank (a
    blank one has no claims and costs no call)."""
    sendable = rows.filter(~pl.col(BLANK)).select(S.ROW_KEY, S.ANSWER, S.QUESTION)
    return [ExtractItem(key, answer, question) for key, answer, question in sendable.iter_rows()]


def verdict_items(
    extract: Sequence[ExtractItem], claims: Sequence[Sequence[str] | None], rows: pl.DataFrame
) -> list[VerdictItem]:
    """What ``rows``' answers (``extract``: their :func:`extract_items`) ask of a judge's verdicts, given
    their claims: those with claims and passages (claims without passages are all unsupported, no call)."""
    contexts = rows.filter(~pl.col(BLANK)).get_column(S.CONTEXT).to_list()
    return [
        VerdictItem(it.id, tuple(found), tuple(passages), it.question)
        for it, found, passages in zip(extract, claims, contexts, strict=True)
        if found and passages
    ]


def _claims_column(per_row: list[list[str] | None]) -> pl.Series:
    """``claims`` built from flat strings and offsets (see :func:`_verdict_column`)."""
    flat = _arrow([c for found in per_row if found for c in found], pl.String)
    return pl.Series(S.CLAIMS, pa.LargeListArray.from_arrays(_offsets(per_row), flat, mask=_missing(per_row)))


def _offsets(per_row: Sequence[Sequence[Any] | None]) -> pa.Array:
    return _arrow(list(accumulate((len(v) if v else 0 for v in per_row), initial=0)), pl.Int64)


def _missing(per_row: Sequence[Sequence[Any] | None]) -> pa.Array:
    return _arrow([v is None for v in per_row], pl.Boolean)


def _verdict_column(per_row: list[Sequence[ClaimVerdict] | None]) -> pl.Series:
    """``_fp_verdicts`` built field by field (flat arrays and offsets), not verdict by verdict."""
    flat = [v for verdicts in per_row if verdicts for v in verdicts]
    struct = pa.StructArray.from_arrays(
        [
            _arrow([v.verdict for v in flat], pl.String),
            _arrow([v.speculative for v in flat], pl.Boolean),
            _arrow([v.reason for v in flat], pl.String),
            _arrow([v.evidence for v in flat], pl.Int32),
        ],
        names=["verdict", "speculative", "reason", "evidence_index"],
    )
    return pl.Series(S.VERDICTS, pa.LargeListArray.from_arrays(_offsets(per_row), struct, mask=_missing(per_row)))


def _arrow(values: list[Any], dtype: type[pl.DataType]) -> pa.Array:
    """``values`` as an Arrow array built by polars: ``pa.array`` on a Python list imports pandas first
    (pyarrow checks whether it was given pandas objects), 0.6 s of a cold run's CPU when pandas is
    installed and nobody else uses it."""
    return pl.Series(values, dtype=dtype).to_arrow()


def _usage_columns(usages: list[Usage], names: Sequence[str]) -> list[pl.Series]:
    return [
        pl.Series(names[0], [u.llm_calls for u in usages], dtype=pl.Float64),
        pl.Series(names[1], [u.prompt_tokens for u in usages], dtype=pl.Int64),
        pl.Series(names[2], [u.completion_tokens for u in usages], dtype=pl.Int64),
        pl.Series(names[3], [u.cost_usd for u in usages], dtype=pl.Float64),
        pl.Series(names[4], [u.cached_prompt_tokens for u in usages], dtype=pl.Int64),
    ]


def _half(progress: RowProgress | None) -> Hooks[Any]:
    if progress is None:
        return Hooks()
    return Hooks(progress=lambda n: progress(n / 2))


def _check_ids(step: str, sent: list[str], got: list[str]) -> None:
    # The port promises one result per item in order; a judge that breaks it is a bug, not a row error.
    if sent != got:
        raise RuntimeError(f"judge broke the port contract in {step}: results do not match items one to one")


class _RowResults:
    """What :func:`judge_rows` finds for each of its rows (by position), one list a result column, filled in as
    each step's results come back; :meth:`frame` turns finished rows into :data:`RESULT_COLUMNS`."""

    def __init__(self, row_ids: pl.Series) -> None:
        n = row_ids.len()
        self.row_ids = row_ids
        self.claims: list[list[str] | None] = [[] for _ in range(n)]
        self.errors: list[str | None] = [None] * n
        self.x_usages = [Usage() for _ in range(n)]
        self.verdicts: list[Sequence[ClaimVerdict] | None] = [None] * n
        self.truncated = [False] * n
        self.v_usages = [NO_USAGE] * n
        self.sources: list[ResultSource] = ["none"] * n
        self.billed = [NO_USAGE] * n

    def account(self, i: int, result: ExtractResult | VerdictResult) -> None:
        """Row ``i``'s source and what this run paid for it, after one of its steps."""
        source = source_of(result)
        if _SOURCE_RANK[source] > _SOURCE_RANK[self.sources[i]]:
            self.sources[i] = source
        self.billed[i] = self.billed[i] + billed_of(result)

    def frame(self, done: list[int]) -> pl.DataFrame:
        return pl.DataFrame(
            [
                self.row_ids.gather(done),
                _claims_column([self.claims[i] for i in done]),
                pl.Series(S.ERROR, [self.errors[i] for i in done], dtype=pl.String),
                *_usage_columns([self.x_usages[i] for i in done], X_USAGE),
                _verdict_column([self.verdicts[i] for i in done]),
                pl.Series(S.CONTEXT_TRUNCATED, [self.truncated[i] for i in done], dtype=pl.Boolean),
                *_usage_columns([self.v_usages[i] for i in done], V_USAGE),
                pl.Series(S.RESULT_SOURCE, [self.sources[i] for i in done], dtype=pl.String),
                *_usage_columns([self.billed[i] for i in done], S.BILLED_COLUMNS),
            ]
        )


class _RowFlow:
    """One :func:`judge_rows` call: its rows' inputs, the judge, and the results frames of the calls done so far."""

    def __init__(self, rows: pl.DataFrame, judge: Judge, progress: RowProgress | None) -> None:
        self.judge = judge
        self.progress = progress
        self.hooks = _half(progress)
        # Passages stay a column until their call's verdicts are due: making them Python strings is work.
        self.passages = rows.get_column(S.CONTEXT)
        self.keys = rows.get_column(S.ROW_KEY).to_list()
        self.answers = rows.get_column(S.ANSWER).to_list()
        self.questions = rows.get_column(S.QUESTION).to_list()
        self.found = _RowResults(rows.get_column(INDEX))
        self.parts: list[pl.DataFrame] = []

    async def claims_then_verdicts(self, batch: list[int]) -> None:
        found = self.found
        items = [ExtractItem(id=self.keys[i], answer=self.answers[i], question=self.questions[i]) for i in batch]
        results = await self.judge.extract_claims(items, self.hooks)
        _check_ids("extract_claims", [it.id for it in items], [r.id for r in results])
        for i, result in zip(batch, results, strict=True):
            found.claims[i] = list(result.claims) if result.claims is not None else None
            found.errors[i] = (None if result.error is None else result.error if source_of(result) == "skipped"
                               else f"claim extraction failed: {result.error}")
            found.x_usages[i] = result.usage
            found.account(i, result)
        await self.verdicts_of(batch)

    async def verdicts_of(self, batch: list[int]) -> None:
        """The verdicts of ``batch``'s claims, then its rows' results frame."""
        found = self.found
        with_claims = [i for i in batch if found.errors[i] is None and found.claims[i]]
        gathered = self.passages.gather(with_claims).to_list() if with_claims else []
        context = dict(zip(with_claims, gathered, strict=True))
        todo = self._settle_without_a_call(batch, context)
        if todo:
            items = [
                VerdictItem(id=self.keys[i], claims=tuple(found.claims[i] or ()), context=tuple(context[i]),
                            question=self.questions[i])
                for i in todo
            ]
            results = await self.judge.judge_claims(items, self.hooks)
            _check_ids("judge_claims", [it.id for it in items], [r.id for r in results])
            for i, result in zip(todo, results, strict=True):
                self._take_verdicts(i, result)
        self.parts.append(found.frame(batch))

    def _settle_without_a_call(self, batch: list[int], context: dict[int, list[str]]) -> list[int]:
        """Gives ``batch``'s rows without claims no verdicts, and claims without passages all ``unsupported``;
        returns the rows whose verdicts must be asked."""
        found = self.found
        todo: list[int] = []
        for i in batch:
            if found.errors[i] is not None:
                continue
            if not found.claims[i]:
                found.verdicts[i] = ()
            elif not context[i]:
                found.verdicts[i] = (_NO_CONTEXT_VERDICT,) * len(found.claims[i] or ())
            else:
                todo.append(i)
        if self.progress is not None and len(todo) < len(batch):
            self.progress((len(batch) - len(todo)) / 2)
        return todo

    def _take_verdicts(self, i: int, result: VerdictResult) -> None:
        found = self.found
        found.v_usages[i] = result.usage
        found.truncated[i] = result.context_truncated
        found.account(i, result)
        count = len(found.claims[i] or ())
        if source_of(result) == "skipped":
            found.errors[i] = result.error  # the cap's own words: not a failure
            return
        if result.verdicts is None or len(result.verdicts) != count:
            found.errors[i] = f"claim verdicts failed: {result.error or 'judge returned a wrong number of verdicts'}"
            return
        found.verdicts[i] = result.verdicts


async def judge_rows(
    rows: pl.DataFrame, judge: Judge, progress: RowProgress | None = None, *, overlap: int | None = None
) -> pl.DataFrame:
    """The :data:`RESULT_COLUMNS` of ``rows`` (in no particular row order) through the per-item port.

    Blank answers have no claims and cost no call; claims with an empty context are all ``unsupported``
    without a call (SPEC §3b). With ``overlap`` (``Judging.overlap_rows``) the answers go in calls of that many and
    each call's verdicts leave as soon as its claims are back. Work that is not a request stays off the
    path of the first and the last one: passages become Python strings only when their call's verdicts
    are due, and each call's rows become a small result frame as soon as its verdicts are back.
    """
    progress = safe_progress(progress)
    n = rows.height
    size = max(1, overlap or n)
    blank = rows.get_column(BLANK).to_list()
    flow = _RowFlow(rows, judge, progress)
    blank_rows = [i for i in range(n) if blank[i]]
    send = [i for i in range(n) if not blank[i]]
    if progress is not None and blank_rows:
        progress(len(blank_rows) / 2)
    async with asyncio.TaskGroup() as group:
        if blank_rows:
            group.create_task(flow.verdicts_of(blank_rows))
        for start in range(0, len(send), size):
            group.create_task(flow.claims_then_verdicts(send[start : start + size]))
    return pl.concat(flow.parts, how="vertical") if flow.parts else flow.found.frame([])
