"""The Python entry points: score a table with a judge (offline by default).

``score_frame`` works in a plain script and inside a running event loop (a Jupyter notebook), where it
runs the scoring on a worker thread with its own loop; ``await score_frame_async(...)`` scores on the
caller's loop. Both take a polars or pandas DataFrame or a pyarrow Table (converted at the edge, every
column passed through) and return a polars DataFrame.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging

import polars as pl

from faithfulness_pipeline.api.run import judge_run
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.flow import RowProgress
from faithfulness_pipeline.core.port import Judge
from faithfulness_pipeline.sources.frames import Table, to_polars
from faithfulness_pipeline.sources.open import open_source
from faithfulness_pipeline.traces.conversations import SpanCount

log = logging.getLogger(__name__)


def default_judge() -> Judge:
    """The offline lexical judge: no key, no network; a baseline that says so in ``judge_model``."""
    from faithfulness_pipeline.judging.offline.judge import OfflineJudge

    return OfflineJudge()


def _log_spans(count: SpanCount | None) -> None:
    """What a table of spans held, on this module's logger: a warning naming the spans whose attributes
    could not be read (their rows have nothing to judge)."""
    if count is None:
        return
    for line in count.lines():
        (log.warning if count.unreadable else log.info)("%s", line)


async def score_frame_async(
    df: Table,
    judge: Judge | None = None,
    config: ScoringConfig | None = None,
    progress: RowProgress | None = None,
) -> pl.DataFrame:
    """:func:`score_frame` for code already in an event loop (``await`` it in a notebook cell); closes the
    judge when done."""
    config = config or ScoringConfig()
    # A table only: a path given here is refused, not read as files (reading files is the command line's).
    with open_source(to_polars(df), rows=config.chunk_rows) as source:
        _log_spans(source.spans)
        async with judge_run(judge if judge is not None else default_judge(), source.chunks, config,
                             progress=progress) as scored:
            return pl.concat([part async for part in scored], how="vertical")


def score_frame(
    df: Table,
    judge: Judge | None = None,
    config: ScoringConfig | None = None,
    progress: RowProgress | None = None,
) -> pl.DataFrame:
    """Score every row of ``df`` and return the scored table (one output row per judged answer).

    A judge that names its result scope (the offline and the litellm judge do) is put in a judge stack
    (``judging.stack``), without a store, unless it is one already: identical items are asked once.
    Inside a running event loop (Jupyter) the scoring runs on a worker thread with a loop of its own, and
    this call waits for it.

    >>> import polars as pl
    >>> df = pl.DataFrame({"output": ["Paris is the capital of France."],
    ...                    "context": [["Paris is the capital of France."]]})
    >>> score_frame(df).select("hallucination_score", "faithfulness_score").row(0)
    (0.0, 1.0)
    """
    scoring = score_frame_async(df, judge, config, progress)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(scoring)
    # asyncio.run refuses to nest in a running loop, and blocking that loop on itself would deadlock.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="score_frame") as pool:
        return pool.submit(asyncio.run, scoring).result()
