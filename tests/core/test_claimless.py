"""Long answers without claims: the words counted in all three languages, and when the warning is due."""

from __future__ import annotations

import polars as pl
import pytest

from faithfulness_pipeline.core.claimless import MIN_WORDS, Claimless, answer_words, count_claimless


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ("The Eiffel Tower is 330 metres tall, and it opened in 1889.", 12),
        ("埃菲尔铁塔高330米。", 8),  # Han characters are words one by one; the number is one word
        ("에펠탑은 높이가 330미터이며 1889년에 개장했습니다.", 5),  # Korean words are spaced
        ("OK!", 1),
        ("", 0),
        ("  — … !!", 0),  # punctuation and symbols are not words
    ],
)
def test_words_are_counted_per_script(answer: str, words: int) -> None:
    assert pl.select(answer_words(pl.lit(answer))).item() == words


def _scored(answers: list[str], claims: list[int], status: list[str] | None = None) -> pl.DataFrame:
    return pl.DataFrame({"output": answers, "n_claims": claims, "status": status or ["ok"] * len(answers)},
                        schema_overrides={"n_claims": pl.Int32})


LONG_EN = "The warranty covers parts and labour for two full years after purchase."
LONG_ZH = "保修期为购买后两年，涵盖零件和人工费用。"
LONG_KO = "보증 기간은 구매 후 2년이며 부품과 인건비를 모두 포함합니다 그리고 연장도 가능합니다."


def test_short_answers_and_error_rows_are_not_counted() -> None:
    scored = _scored(["Hello!", "I don't know.", LONG_EN, LONG_ZH], [0, 0, 2, 0], ["ok", "ok", "ok", "error"])
    assert count_claimless(scored, "output") == Claimless(long_answers=1, without_claims=0)


def test_a_judge_that_finds_nothing_in_any_language_warns_once_over_the_share() -> None:
    for answer in (LONG_EN, LONG_ZH, LONG_KO):
        assert pl.select(answer_words(pl.lit(answer))).item() >= MIN_WORDS, answer
    silent = count_claimless(_scored([LONG_EN, LONG_ZH, LONG_KO, LONG_EN], [0, 0, 0, 3]), "output")
    assert silent == Claimless(4, 3) and silent.share == 0.75
    warning = silent.warning(0.5)
    assert warning is not None and "3 of 4 answers of 8+ words (75%)" in warning
    assert "max_zero_claim_share 0.5" in warning
    assert silent.warning(0.75) is None  # at the limit is not over it
    # chunks add up
    assert silent + Claimless(2, 0) == Claimless(6, 3)


def test_a_table_without_the_answer_column_counts_nothing() -> None:
    assert count_claimless(_scored([LONG_EN], [0]).rename({"output": "answer"}), "output") == Claimless()
    assert Claimless().warning(0.0) is None
