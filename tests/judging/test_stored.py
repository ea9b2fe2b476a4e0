"""The judge stack's result store around judges other than the litellm one (that one: test_litellm_judge.py,
test_row_results.py): any judge that names its result scope can be stacked, the stack serves what is
stored and stores what the inner judge reports, and a wrapped run gives the very table of an unwrapped one."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.api import score_frame_async
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.port import ExtractItem, ExtractResult, Hooks, ResultScope, VerdictItem, VerdictResult
from faithfulness_pipeline.judging.offline.judge import OfflineJudge
from faithfulness_pipeline.judging.stack import JudgeStack
from faithfulness_pipeline.judging.store.open import open_store
from faithfulness_pipeline.judging.store.sqlite import ResultStore
from faithfulness_pipeline.testing.marker_judge import MarkerJudge


class ScopedJudge(MarkerJudge):
    """The scripted judge, overlapping its calls, with a result scope: it may be stored."""

    overlap_rows = 3

    def result_scope(self) -> ResultScope:
        return ResultScope(("extract", "scripted"), ("verdict", "scripted"), ("row", "scripted"))


def _rows(n: int) -> pl.DataFrame:
    answers: list[str | None] = []
    contexts: list[list[str] | None] = []
    for i in range(n):
        kind = i % 7
        answers.append(None if kind == 0 else "Is it?" if kind == 1 else f"Row {i} is fine. It has [C] a flaw."
                       if kind == 2 else f"Row {i} [U] is vague. It [H] may be." if kind == 3 else f"Row {i} is fine.")
        contexts.append([] if kind == 4 else [f"passage {i}", "shared"])
    return pl.DataFrame(
        {"conversation_id": [f"c{i}" for i in range(n)], "output": answers, "context": contexts},
        schema={"conversation_id": pl.String, "output": pl.String, "context": pl.List(pl.String)},
    )


def _scored(df: pl.DataFrame, judge: object, chunk_rows: int = 10) -> pl.DataFrame:
    async def run() -> pl.DataFrame:
        try:
            return await score_frame_async(df, judge, ScoringConfig(chunk_rows=chunk_rows))  # type: ignore[arg-type]
        finally:
            await judge.aclose()  # type: ignore[attr-defined]

    return asyncio.run(run())


def _score(df: pl.DataFrame, judge: object, chunk_rows: int = 10) -> pl.DataFrame:
    """The scored table without the columns that describe the run (where results came from, the bill)."""
    return _scored(df, judge, chunk_rows).drop(S.RUN_COLUMNS)


@pytest.mark.parametrize("chunk_rows", [4, 10, 1000])
def test_a_partly_warm_store_gives_the_unwrapped_table(tmp_path: Path, chunk_rows: int) -> None:
    df = _rows(40)
    failing = {"fail_extract": {"c12"}, "fail_verdicts": {"c19"}}
    expected = _score(df, ScopedJudge(**failing), chunk_rows)  # type: ignore[arg-type]
    store = tmp_path / "r.sqlite"
    # A first run over every other row fills the store in part: whole rows, step results, nothing.
    first = ScopedJudge(**failing)  # type: ignore[arg-type]
    _score(df.gather_every(2), JudgeStack(first, open_store(store)), chunk_rows)
    second = ScopedJudge(**failing)  # type: ignore[arg-type]
    wrapped = JudgeStack(second, open_store(store))
    got = _score(df, wrapped, chunk_rows)
    assert got.equals(expected)
    # Only the rows the first run did not finish were asked again (failed rows are never stored).
    asked = {item.id for item in second.extract_calls}
    assert asked and all(int(key[1:]) % 2 == 1 or key in ("c12",) for key in asked)
    assert wrapped.stats().cached_items > 0


def test_the_offline_judge_can_use_a_store(tmp_path: Path) -> None:
    df = _rows(30)
    expected = _score(df, OfflineJudge(processes=1))
    store = tmp_path / "offline.sqlite"
    cold = JudgeStack(OfflineJudge(processes=1), open_store(store))
    assert _score(df, cold).equals(expected)
    warm = JudgeStack(OfflineJudge(processes=1), open_store(store))
    assert _score(df, warm).equals(expected)
    answered = df.filter(pl.col("output").is_not_null()).height - 4  # "Is it?" rows have no claims to judge
    assert warm.stats().cached_items >= answered


def test_results_are_kept_as_the_inner_judge_reports_them(tmp_path: Path) -> None:
    """A judge that fails after reporting half of its results has stored that half: a crash loses only what
    was in flight."""

    class Crashing(ScopedJudge):
        async def extract_claims(self, items: Sequence[ExtractItem], hooks: Hooks[ExtractResult] | None = None
                                 ) -> list[ExtractResult]:
            done = await super().extract_claims(items[:2])
            assert hooks is not None and hooks.settled is not None
            hooks.settled(done)
            raise RuntimeError("the process died here")

    store = tmp_path / "r.sqlite"
    items = [ExtractItem(f"i{k}", f"Claim number {k}.") for k in range(4)]
    with pytest.raises(RuntimeError, match="died"):
        asyncio.run(JudgeStack(Crashing(), open_store(store)).extract_claims(items))
    again = ScopedJudge()
    results = asyncio.run(JudgeStack(again, open_store(store)).extract_claims(items))
    assert [r.cached for r in results] == [True, True, False, False]
    assert [it.id for it in again.extract_calls] == ["i2", "i3"]


def test_recheck_serves_what_another_process_stored_meanwhile(tmp_path: Path) -> None:
    store = tmp_path / "shared.sqlite"
    items = [VerdictItem(f"v{k}", (f"Claim {k}.",), ("passage",)) for k in range(3)]

    class Racing(ScopedJudge):
        async def judge_claims(self, items: Sequence[VerdictItem], hooks: Hooks[VerdictResult] | None = None
                               ) -> list[VerdictResult]:
            # "another process" judges and stores the last item while this one is about to send (one that
            # takes no leases, as an older version: a leasing one would wait for this call's lease)
            other = JudgeStack(ScopedJudge(), open_store(store), lease_s=0)
            await other.judge_claims([items[-1]])
            await other.aclose()
            assert hooks is not None and hooks.recheck is not None
            found = hooks.recheck([it.id for it in items])
            assert list(found) == [items[-1].id] and found[items[-1].id].cached
            rest = await super().judge_claims([it for it in items if it.id not in found])
            return [*rest, found[items[-1].id]]

    judge = JudgeStack(Racing(), open_store(store))
    results = asyncio.run(judge.judge_claims(items))
    assert [r.id for r in results] == ["v0", "v1", "v2"] and [r.cached for r in results] == [False, False, True]
    assert judge.stats().cached_items == 1


def test_refresh_asks_everything_again_and_still_stores(tmp_path: Path) -> None:
    store = tmp_path / "r.sqlite"
    items = [ExtractItem(f"i{k}", f"Claim {k}.") for k in range(3)]
    asyncio.run(JudgeStack(ScopedJudge(), open_store(store)).extract_claims(items))
    fresh = ScopedJudge()
    results = asyncio.run(JudgeStack(fresh, open_store(store), refresh=True).extract_claims(items))
    assert len(fresh.extract_calls) == 3 and not any(r.cached for r in results)
    assert ResultStore(store).count() == 3


def test_a_judge_that_does_not_name_its_scope_cannot_be_stored(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot use a result store"):
        JudgeStack(MarkerJudge(), open_store(tmp_path / "r.sqlite"))
