"""The Python entry points: score a polars frame or a Parquet input with a judge (offline by default)."""

from __future__ import annotations

import asyncio

import polars as pl

from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.flow import RowProgress
from faithfulness_pipeline.core.judge import Judge
from faithfulness_pipeline.core.pipeline import score_frame_async


def default_judge() -> Judge:
    """The offline lexical judge: no key, no network; a baseline that says so in ``judge_model``."""
    from faithfulness_pipeline.judges.offline import OfflineJudge

    return OfflineJudge()


def score_frame(
    df: pl.DataFrame,
    judge: Judge | None = None,
    config: ScoringConfig | None = None,
    progress: RowProgress | None = None,
) -> pl.DataFrame:
    """Score every row of ``df`` and return the scored table (one output row per judged answer).

    A judge that names its result scope (the offline and the litellm judge do) is put behind the
    stored-judge wrapper, without a store, unless it is one already: identical items are asked once.

    >>> import polars as pl
    >>> df = pl.DataFrame({"output": ["Paris is the capital of France."],
    ...                    "context": [["Paris is the capital of France."]]})
    >>> score_frame(df).select("hallucination_score", "faithfulness_score").row(0)
    (0.0, 1.0)
    """
    chosen = _once_per_content(judge if judge is not None else default_judge())
    config = config or ScoringConfig()

    async def run() -> pl.DataFrame:
        try:
            return await score_frame_async(df, chosen, config, progress)
        finally:
            await chosen.aclose()

    return asyncio.run(run())


def _once_per_content(judge: Judge) -> Judge:
    from faithfulness_pipeline.judges.stored import Storable, StoredJudge

    if isinstance(judge, StoredJudge) or not isinstance(judge, Storable):
        return judge
    wrapped: Judge = StoredJudge(judge, None)
    return wrapped
