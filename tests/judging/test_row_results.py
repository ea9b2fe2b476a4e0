"""Whole-row entries of the result store: their keys, their values, and how a re-run uses them."""

from __future__ import annotations

import asyncio
import hashlib
import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from faithfulness_pipeline.api import score_frame_async
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.port import JudgeStats
from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
from faithfulness_pipeline.judging.stack import JudgeStack
from faithfulness_pipeline.judging.store.keys import KeyMaker
from faithfulness_pipeline.judging.store.open import open_store
from faithfulness_pipeline.judging.store.rows import decode_rows, encode_rows, row_keys
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge, typical_frame

_TEXTS = ["a", "", " ", "臺北。", "서울은 크다.", "x\x00y", "\x01", "l1,2;", "é" * 3000, "🙂", 'q "u" \\ n\n']


def _expected_key(settings: tuple[str, ...], question: str | None, answer: str, passages: list[str]) -> bytes:
    """The documented layout, written out independently of the column-wise code."""
    base = hashlib.sha256(b"fp-result-v2")
    head = ",".join(str(len(s)) for s in settings) + "\x00" + "".join(settings)
    base.update(head.encode("utf-8"))
    lengths = ",".join(str(len(p.encode())) for p in passages)
    q = "n" if question is None else str(len(question.encode()))
    content = f"r{q},{len(answer.encode())};{lengths}\x01{question or ''}{answer}" + "".join(passages)
    base.update(content.encode("utf-8"))
    return base.digest()[:16]


def test_row_keys_follow_the_documented_layout_on_every_kind_of_text() -> None:
    rng = random.Random(11)
    settings = ("row", "x1", "v1", "openai/m")
    rows = [(rng.choice([None, *_TEXTS]), rng.choice(_TEXTS[:1] + _TEXTS[3:]),
             [rng.choice(_TEXTS) for _ in range(rng.randint(0, 5))]) for _ in range(600)]
    questions = pl.Series([q for q, _, _ in rows], dtype=pl.String)
    answers = pl.Series([a for _, a, _ in rows], dtype=pl.String)
    passages = pl.Series([p for _, _, p in rows], dtype=pl.List(pl.String))
    keys = row_keys(KeyMaker(*settings), questions, answers, passages)
    assert keys == [_expected_key(settings, q, a, p) for q, a, p in rows]
    # Slices of a column (chunks of a bigger frame) start inside Arrow buffers: the same keys.
    assert row_keys(KeyMaker(*settings), questions[100:200], answers[100:200], passages[100:200]) == keys[100:200]


def test_row_keys_tell_apart_contents_with_the_same_bytes() -> None:
    maker = KeyMaker("row", "x1", "v1", "openai/m")

    def key(question: str | None, answer: str, passages: list[str]) -> bytes:
        frame = pl.DataFrame({"q": [question], "a": [answer], "p": [passages]},
                             schema={"q": pl.String, "a": pl.String, "p": pl.List(pl.String)})
        return row_keys(maker, frame["q"], frame["a"], frame["p"])[0]

    variants = [
        key("ab", "c", ["d"]), key("a", "bc", ["d"]), key(None, "abc", ["d"]), key("", "abc", ["d"]),
        key("ab", "cd", []), key("ab", "c", ["d", ""]), key("ab", "c", ["", "d"]), key("ab", "c", ["d"]) + b"",
    ]
    assert len(set(variants[:-1])) == len(variants) - 1
    assert variants[0] == variants[-1]
    assert key("q", "a", ["p"]) != row_keys(KeyMaker("row", "x2", "v1", "openai/m"), *(
        pl.Series([v], dtype=d) for v, d in (("q", pl.String), ("a", pl.String), (["p"], pl.List(pl.String)))
    ))[0]


def _results() -> pl.DataFrame:
    verdicts = [
        [{"verdict": "supported", "speculative": False, "reason": None, "evidence_index": 0},
         {"verdict": "contradicted", "speculative": True, "reason": '文中寫的是 1998 年，"不是" 1999。', "evidence_index": None},
         {"verdict": "unsupported", "speculative": False, "reason": "본문에 없다.\n", "evidence_index": 7}],
        [{"verdict": "supported", "speculative": True, "reason": "", "evidence_index": 2}],
    ]
    return pl.DataFrame({
        "claims": [["臺北的人口約二百五十萬。", "It opened in 1999.", "탑은 금색이다."], ["null"]],
        "verdicts": verdicts,
        "context_truncated": [True, False],
        "x_llm_calls": [1 / 3, 0.03125], "x_prompt_tokens": [1234, 0], "x_completion_tokens": [56, 0],
        "x_cost_usd": [0.000123 / 7, None],
        "v_llm_calls": [1 / 7, 1.0], "v_prompt_tokens": [999, 3], "v_completion_tokens": [12, 4],
        "v_cost_usd": [0.1 + 0.2, 0.0],
        "x_cached_prompt_tokens": [1152, 0], "v_cached_prompt_tokens": [0, 3],
    }, schema_overrides={"verdicts": pl.List(S.RAW_VERDICT_STRUCT), "x_prompt_tokens": pl.Int64,
                         "x_completion_tokens": pl.Int64, "v_prompt_tokens": pl.Int64, "v_completion_tokens": pl.Int64,
                         "x_cached_prompt_tokens": pl.Int64, "v_cached_prompt_tokens": pl.Int64})


def test_values_decode_to_the_very_columns_that_were_encoded() -> None:
    results = _results()
    values = encode_rows(results).cast(pl.Binary).to_list()
    decoded = decode_rows([values[0], None, values[1]])
    assert decoded is not None
    assert decoded.get_column("verdicts").is_null().to_list() == [False, True, False]
    got = decoded[[0, 2]].select(results.columns)
    assert got.equals(results), (got, results)
    assert got.schema == results.schema


def test_a_damaged_value_costs_its_own_row_or_the_column_never_a_wrong_result() -> None:
    good = encode_rows(_results()).cast(pl.Binary).to_list()
    short = good[0].replace(b'"l":"SCU"', b'"l":"SC"')  # two letters for three claims
    letter = good[0].replace(b'"l":"SCU"', b'"l":"SCX"')
    flag = good[0].replace(b'"s":"010"', b'"s":"012"')
    usage = good[0].replace(b'"x":["', b'"x":["oops","')
    decoded = decode_rows([good[0], short, letter, flag, usage, good[1]])
    assert decoded is not None
    assert decoded.get_column("verdicts").is_null().to_list() == [False, True, True, True, True, False]
    assert decode_rows([good[0], b"not json"]) is None
    assert decode_rows([good[0], b"\xff\xfe"]) is None  # not UTF-8
    assert decode_rows([good[0], "text, not bytes"]) is None


# ------------------------------------------------------------------------------ through the pipeline


_KEY_ENV = "FP_TEST_ROW_RESULTS_KEY"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_KEY_ENV, "sk-test-not-a-secret")


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(ScriptedJudge(grounded=True)) as fake:
        yield fake


def _frame(n: int = 40) -> pl.DataFrame:
    return typical_frame(n, seed=21, ids="c{}")


def _score(server: FakeLLMServer, frame: pl.DataFrame, store: Path, **overrides: Any) -> tuple[pl.DataFrame, JudgeStats]:
    refresh = overrides.pop("refresh", False)
    config = JudgeSettings(model="openai/fake-judge", api_base=server.base_url, api_key_env=_KEY_ENV, **overrides)
    judge = JudgeStack(LiteLLMJudge(config), open_store(store), refresh=refresh)

    async def main() -> pl.DataFrame:
        try:
            return await score_frame_async(frame, judge, ScoringConfig(chunk_rows=16))
        finally:
            await judge.aclose()

    return asyncio.run(main()), judge.stats()


def _count(store: Path, step: str) -> int:
    with sqlite3.connect(store) as conn:
        return int(conn.execute("SELECT count(*) FROM results WHERE step = ?", (step,)).fetchone()[0])


def test_a_cold_run_keeps_every_judged_row_whole_and_a_re_run_needs_nothing_else(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    frame, store = _frame(), tmp_path / "results.sqlite"
    cold, _ = _score(server, frame, store)
    judged = cold.filter(pl.col("n_claims") > 0, pl.col("context").list.len() > 0).height
    assert judged > 0 and _count(store, "row") == judged
    with sqlite3.connect(store) as conn:  # the step results gone: the rows alone serve the re-run
        conn.execute("DELETE FROM results WHERE step IN ('extract', 'verdict')")
    server.reset_stats()
    warm, stats = _score(server, frame, store)
    rest = frame.height - judged  # rows without claims are extracted again: they have no whole entry
    assert (server.stats().requests == 0) == (rest == 0)
    assert stats.cached_items == 2 * judged
    assert warm.drop(S.RUN_COLUMNS).equals(cold.drop(S.RUN_COLUMNS))


def test_a_store_without_whole_rows_serves_a_re_run_step_by_step_and_gains_them(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    # A store filled before rows were kept whole, or one whose row entries were lost.
    frame, store = _frame(), tmp_path / "results.sqlite"
    cold, _ = _score(server, frame, store)
    rows = _count(store, "row")
    with sqlite3.connect(store) as conn:
        conn.execute("DELETE FROM results WHERE step = 'row'")
    server.reset_stats()
    warm, _ = _score(server, frame, store)
    assert server.stats().requests == 0
    assert _count(store, "row") == rows
    assert warm.drop(S.RUN_COLUMNS).equals(cold.drop(S.RUN_COLUMNS))


def test_a_damaged_row_entry_is_served_step_by_step_and_written_again(server: FakeLLMServer, tmp_path: Path) -> None:
    frame, store = _frame(), tmp_path / "results.sqlite"
    cold, _ = _score(server, frame, store)
    with sqlite3.connect(store) as conn:
        key, value = conn.execute("SELECT key, value FROM results WHERE step = 'row' LIMIT 1").fetchone()
        conn.execute("UPDATE results SET value = ? WHERE key = ?", (value.replace(b'"l":"', b'"l":"X'), key))
    server.reset_stats()
    warm, _ = _score(server, frame, store)
    assert server.stats().requests == 0
    assert warm.drop(S.RUN_COLUMNS).equals(cold.drop(S.RUN_COLUMNS))
    with sqlite3.connect(store) as conn:
        assert conn.execute("SELECT value FROM results WHERE key = ?", (key,)).fetchone()[0] == value


def test_refresh_asks_again_and_rewrites_whole_rows(server: FakeLLMServer, tmp_path: Path) -> None:
    frame, store = _frame(12), tmp_path / "results.sqlite"
    _score(server, frame, store)
    rows = _count(store, "row")
    server.reset_stats()
    _, stats = _score(server, frame, store, refresh=True)
    assert server.stats().requests > 0 and stats.cached_items == 0
    assert _count(store, "row") == rows
