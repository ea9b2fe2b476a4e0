"""The overlapped pipeline (a judge with ``overlap_rows``) gives the very table of one call per step: every
row, in input order, error rows and usage included. (The result-store wrapper's whole-row path is held
to the same table in tests/judging/test_stored.py.)"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import polars as pl
import pytest

from faithfulness_pipeline.api import score_frame_async
from faithfulness_pipeline.core import pipeline
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.core.pipeline import chunks_of, score_chunks
from faithfulness_pipeline.core.port import (
    ExtractItem,
    ExtractResult,
    Hooks,
    Overlapping,
    VerdictItem,
    VerdictResult,
)
from faithfulness_pipeline.testing.marker_judge import MarkerJudge


class SlowOverlappingJudge(MarkerJudge):
    """Scripted results, each call finishing after a random pause, so that calls end out of order."""

    overlap_rows = 3

    def __init__(self, seed: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.rng = random.Random(seed)
        self.running = 0
        self.most_running = 0

    async def _pause(self) -> None:
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        await asyncio.sleep(self.rng.random() / 200)
        self.running -= 1

    async def extract_claims(self, items: Sequence[ExtractItem], hooks: Hooks[ExtractResult] | None = None
                             ) -> list[ExtractResult]:
        await self._pause()
        return await super().extract_claims(items, hooks)

    async def judge_claims(self, items: Sequence[VerdictItem], hooks: Hooks[VerdictResult] | None = None
                           ) -> list[VerdictResult]:
        await self._pause()
        return await super().judge_claims(items, hooks)


def _rows(n: int) -> pl.DataFrame:
    answers: list[str | None] = []
    contexts: list[list[str] | None] = []
    for i in range(n):
        kind = i % 9
        answers.append(
            None if kind == 0 else "  \u3000" if kind == 1 else "Is it? Really?" if kind == 2
            else f"Row {i} is fine. It has [C] a flaw." if kind == 3 else f"Row {i} [U] is vague. It [H] may be."
            if kind == 4 else f"Row {i} is fine."
        )
        contexts.append([] if kind == 5 else None if kind == 6 else [f"passage {i}", "shared"])
    return pl.DataFrame(
        {"conversation_id": [f"c{i}" for i in range(n)], "input": [f"q{i}" if i % 2 else None for i in range(n)],
         "output": answers, "context": contexts},
        schema={"conversation_id": pl.String, "input": pl.String, "output": pl.String, "context": pl.List(pl.String)},
    )


def _score(df: pl.DataFrame, judge: object, chunk_rows: int) -> pl.DataFrame:
    out = asyncio.run(score_frame_async(df, judge, ScoringConfig(chunk_rows=chunk_rows)))  # type: ignore[arg-type]
    return out.drop("scored_at", "scoring_run_id")


@pytest.mark.parametrize("chunk_rows", [4, 10, 1000])
def test_overlapped_pipeline_gives_the_step_by_step_table(chunk_rows: int) -> None:
    df = _rows(47)
    failing = {"fail_extract": {"c10", "c20", "c31"}, "fail_verdicts": {"c12", "c19", "c39"}}
    judge = SlowOverlappingJudge(seed=chunk_rows, **failing)
    assert isinstance(judge, Overlapping)
    expected = _score(df, MarkerJudge(**failing), chunk_rows)  # type: ignore[arg-type]
    got = _score(df, judge, chunk_rows)
    assert got.equals(expected)
    assert got.get_column("conversation_id").to_list() == df.get_column("conversation_id").to_list()
    # c10 and c19 have blank answers: no call, so no failure; the others' failures are error rows.
    assert set(got.filter(pl.col("status") == "error").get_column("conversation_id")) == {"c20", "c31", "c12", "c39"}
    assert judge.most_running > 1  # calls really overlapped


@pytest.mark.parametrize(("chunk_rows", "slice_rows"), [(10, 4), (10, 5), (1000, 7), (3, 7)])
def test_chunks_judged_in_slices_give_the_step_by_step_table_chunk_for_chunk(
    chunk_rows: int, slice_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Slices smaller than a chunk (the default is 2,500 rows: tables here are smaller), one larger.
    monkeypatch.setattr(pipeline, "SLICE_ROWS", slice_rows)
    df = _rows(47)
    failing = {"fail_extract": {"c10", "c20", "c31"}, "fail_verdicts": {"c12", "c19", "c39"}}
    expected = _score(df, MarkerJudge(**failing), chunk_rows)  # type: ignore[arg-type]
    assert _score(df, SlowOverlappingJudge(seed=slice_rows, **failing), chunk_rows).equals(expected)

    async def parts() -> list[int]:
        judge = SlowOverlappingJudge(seed=5)
        return [p.height async for p in score_chunks(chunks_of(df, chunk_rows), judge, ScoringConfig())]

    # What comes out is still one frame per chunk, whatever the slices.
    assert asyncio.run(parts()) == [c.height for c in chunks_of(df, chunk_rows)]


def test_progress_adds_up_to_every_row() -> None:
    df = _rows(30)
    seen: list[float] = []
    asyncio.run(score_frame_async(df, SlowOverlappingJudge(seed=1), ScoringConfig(chunk_rows=7), seen.append))
    assert sum(seen) == pytest.approx(df.height)


def test_a_bad_later_chunk_fails_after_the_chunks_before_it() -> None:
    df = pl.concat([_rows(8), _rows(8)])  # the second half repeats the first half's keys

    got: list[pl.DataFrame] = []

    async def collect() -> None:
        async for part in score_chunks(chunks_of(df, 8), SlowOverlappingJudge(seed=2), ScoringConfig(chunk_rows=8)):
            got.append(part)

    with pytest.raises(InputError, match="duplicate row key"):
        asyncio.run(collect())
    assert [p.height for p in got] == [8]


def test_an_empty_table_keeps_its_schema() -> None:
    df = _rows(0)
    got = _score(df, SlowOverlappingJudge(seed=3), 10)
    assert got.height == 0
    assert got.schema == _score(df, MarkerJudge(), 10).schema
