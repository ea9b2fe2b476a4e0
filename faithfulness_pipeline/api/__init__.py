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
from typing import Any, TypeAlias

import polars as pl
import pyarrow as pa

from faithfulness_pipeline.api.run import judge_run
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.core.flow import RowProgress
from faithfulness_pipeline.core.pipeline import chunks_of
from faithfulness_pipeline.core.port import Judge
from faithfulness_pipeline.traces.conversations import spans_to_conversations
from faithfulness_pipeline.traces.staging import frame_spans

log = logging.getLogger(__name__)

#: What the entry points take: a polars DataFrame, a pyarrow Table or RecordBatch, or a pandas DataFrame
#: (pandas is optional: it is never imported here, only recognised, so it cannot be named in the type).
Table: TypeAlias = Any


def default_judge() -> Judge:
    """The offline lexical judge: no key, no network; a baseline that says so in ``judge_model``."""
    from faithfulness_pipeline.judging.offline.judge import OfflineJudge

    return OfflineJudge()


def to_polars(table: Table) -> pl.DataFrame:
    """``table`` as a polars DataFrame, every column kept (pandas needs ``pip install pandas``)."""
    if isinstance(table, pl.DataFrame):
        return table
    if isinstance(table, pa.Table | pa.RecordBatch):
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame
    if type(table).__module__.split(".")[0] == "pandas" and type(table).__name__ == "DataFrame":
        # The pandas index is not a column; a named index would otherwise be lost silently.
        if any(name is not None for name in table.index.names):
            table = table.reset_index()
        return pl.from_pandas(table)
    raise InputError(
        f"cannot score a {type(table).__module__}.{type(table).__name__}: give a polars or pandas DataFrame or a "
        f"pyarrow Table"
    )


def from_spans(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` itself, or its conversation rows when it is a table of spans (``traces.spans``: Phoenix's spans
    dataframe, or trace_id / span_id / name / attributes): one row per LLM span. Spans whose attributes
    could not be read are named in a warning of this module's logger: their rows have nothing to judge."""
    spans = frame_spans(frame)
    if spans is None:
        return frame
    rows, count = spans_to_conversations(spans)
    for line in count.lines():
        (log.warning if count.unreadable else log.info)("%s", line)
    return rows


async def score_frame_async(
    df: Table,
    judge: Judge | None = None,
    config: ScoringConfig | None = None,
    progress: RowProgress | None = None,
) -> pl.DataFrame:
    """:func:`score_frame` for code already in an event loop (``await`` it in a notebook cell); closes the
    judge when done."""
    frame = from_spans(to_polars(df))
    config = config or ScoringConfig()
    chunk_rows = config.chunk_rows
    async with judge_run(judge if judge is not None else default_judge(), lambda: chunks_of(frame, chunk_rows), config,
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
