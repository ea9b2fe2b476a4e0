"""The run sequence of every entry point: prepare -> prepay -> judge -> close.

``score_frame`` (a table in memory), the command line's ``score`` (files) and the Dagster judge step (a shard
of a day) judge their rows the same way, so the order of the steps lives here once:

- prepare: the judge goes into a judge stack (``judging.stack``), and the rows the run judges are planned
  (``core.sampling``: a cap per model reads the input's keys first);
- prepay: a bulk judge (provider batch jobs) asks for the whole run before it is judged; any other judge
  does nothing here;
- judge: the chunks stream through the core's flow, scored (``core.pipeline.score_chunks``) or, for input
  prepared already, judged alone (``core.pipeline.judge_chunks``: the Dagster assets score in a later step);
- close: the judge is closed however the block ends (a store flushed, connections let go).

An entry point reads its input and writes what comes back; what happens in between is :func:`judge_run`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext

import polars as pl

from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.flow import RowProgress, Rows
from faithfulness_pipeline.core.pipeline import judge_chunks, prepared_chunks, rows_of, sample_of, score_chunks
from faithfulness_pipeline.core.port import Judge
from faithfulness_pipeline.core.sampling import Sample
from faithfulness_pipeline.judging.stack import stack_of
from faithfulness_pipeline.tables.spill import spilled_rows


@asynccontextmanager
async def judge_run(
    judge: Judge,
    chunks: Callable[[], Iterable[pl.DataFrame]],
    config: ScoringConfig,
    *,
    prepared: bool = False,
    sample: Sample | None = None,
    progress: RowProgress | None = None,
    run_id: str | None = None,
    spill: bool = False,
    first_pass: Iterable[pl.DataFrame] | None = None,
) -> AsyncIterator[AsyncIterator[pl.DataFrame]]:
    """One run of ``judge`` over the rows ``chunks`` gives (anew at each call): prepared and prepaid when the
    block is entered, the judged chunks in input order inside it, the judge closed when it ends.

    ``prepared``: the chunks are prepared already (``core.normalize.with_internals``, as the warehouse keeps
    raw rows) and come back with their claims and verdicts, not scored; else they are prepared and scored
    here, every row with ``run_id`` (a new id when None). ``sample``: the rows judged, when the caller plans
    them from more than ``chunks`` (a Dagster shard, from its whole day). ``spill``: a bulk judge's passes
    over the rows read them from temporary files, so files are read twice in all, not once a pass (a table
    in memory is read again for nothing). ``first_pass``: the judging pass's chunks when the caller has begun
    reading them already (the command line reads its first chunk while litellm imports).
    """
    stack = stack_of(judge)
    try:
        if sample is None:
            sample = sample_of(config, chunks() if prepared else prepared_chunks(chunks(), config))
        rows_config = None if prepared else config
        reading: AbstractContextManager[Rows] = (
            spilled_rows(chunks, rows_config, sample) if spill else nullcontext(rows_of(chunks, rows_config, sample))
        )
        with reading as rows:
            await stack.prepay(rows)
        read = chunks() if first_pass is None else first_pass
        if prepared:
            yield judge_chunks(read, stack.judging(), progress, sample)
        else:
            yield score_chunks(read, stack.judging(), config, progress, run_id=run_id, sample=sample)
    finally:
        await stack.aclose()
