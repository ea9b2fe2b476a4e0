"""Text that looks the same is judged the same (issue 40): decomposed Hangul (NFD) and a zero-width space
inside a word are judged, deduplicated and paid for as their canonical form (NFC, no invisible characters),
while the row's own columns are written back exactly as they came."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.core.canonical import canonical, canonical_each
from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
from faithfulness_pipeline.judging.stack import JudgeStack
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data" / "flat"
JUDGED = ["claims", "hallucination_score", "faithfulness_score", "status"]
ZWSP = "\u200b"


def _nfd(text: str | None) -> str | None:
    return None if text is None else unicodedata.normalize("NFD", text)


def _zero_width_inside_words(text: str) -> str:
    return " ".join(word[:2] + ZWSP + word[2:] if len(word) > 3 else word for word in text.split(" "))


def _disguised(answer: str) -> str | None:
    """Korean in decomposed Hangul, anything else with zero-width spaces inside its words."""
    hangul = any("\uac00" <= c <= "\ud7a3" for c in answer)
    return _nfd(answer) if hangul else _zero_width_inside_words(answer)


@pytest.fixture(scope="module")
def rows() -> pl.DataFrame:
    return pl.read_parquet(SAMPLE).filter(pl.col("language").is_in(["ko", "en", "zh-TW"]))


def test_the_canonical_form_is_nfc_without_invisible_characters() -> None:
    frame = pl.DataFrame({"t": [_nfd("한국어 답변"), f"sup{ZWSP}ported\u00ad", None], "c": [[_nfd("문맥")], None, []]})
    out = frame.select(canonical(pl.col("t")), canonical_each(pl.col("c")))
    assert out.get_column("t").to_list() == ["한국어 답변", "supported", None]
    assert out.get_column("c").to_list() == [["문맥"], None, []]


def test_decomposed_hangul_and_zero_width_spaces_are_judged_as_their_canonical_form(rows: pl.DataFrame) -> None:
    disguised = rows.with_columns(
        pl.col("output").map_elements(_disguised, return_dtype=pl.String),
        pl.col("context").list.eval(pl.element().map_elements(_nfd, return_dtype=pl.String)),
    )
    assert not disguised.get_column("output").equals(rows.get_column("output"))
    plain, seen = score_frame(rows), score_frame(disguised)
    assert seen.select(JUDGED).equals(plain.select(JUDGED))
    # a verdict's evidence quotes the row's own passage, as it came: equal once both are in canonical form
    evidence = pl.col("verdicts").list.eval(pl.element().struct.with_fields(
        canonical(pl.element().struct.field("evidence")).alias("evidence")))  # fmt: skip
    assert seen.select(evidence).equals(plain.select(evidence))
    assert (plain.get_column("n_claims") > 0).any()
    # the answers and contexts are written back as they came, not in the form they were judged in
    assert seen.get_column("output").equals(disguised.get_column("output"))
    assert seen.get_column("context").equals(disguised.get_column("context"))


def test_an_nfc_and_an_nfd_copy_of_one_answer_are_paid_for_once(
    rows: pl.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FP_TEST_CANONICAL_KEY", "sk-canonical")
    korean = rows.filter(pl.col("language") == "ko").head(1)
    twice = pl.concat([korean, korean.with_columns(
        pl.col("conversation_id") + "-nfd",
        pl.col("output").map_elements(_nfd, return_dtype=pl.String),
        pl.col("input").map_elements(_nfd, return_dtype=pl.String),
        pl.col("context").list.eval(pl.element().map_elements(_nfd, return_dtype=pl.String)),
    )])  # fmt: skip
    with FakeLLMServer(ScriptedJudge()) as server:
        judge = LiteLLMJudge(JudgeSettings(model="openai/fake-judge", api_base=server.base_url, stream="no",
                                           api_key_env="FP_TEST_CANONICAL_KEY", timeout_s=10))  # fmt: skip
        scored = score_frame(twice, JudgeStack(judge, None))
        asked = server.stats().requests
    assert scored.get_column("status").to_list() == ["ok", "ok"]
    assert scored.get_column("result_source").to_list() == ["llm", "duplicate"]
    assert scored.get_column("claims")[0].to_list() == scored.get_column("claims")[1].to_list()
    assert asked == 2  # one extraction and one verdict request, for both rows
