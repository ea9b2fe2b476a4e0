"""The offline judge, class by class (issue 54): a claim that is a context sentence with one name, place, date or
number swapped for another is contradicted, in English, Chinese and Korean; a number stands for a nearby stated
one only where the claim says it is approximate, and the verdict names the approximation.

The rows are made up for their shape (the dev rows hold none of this class: ``bench/offline_agreement.py`` is
unchanged by it); what must not turn into a contradiction is tested beside each case."""

from __future__ import annotations

import pytest

from faithfulness_pipeline import score_frame
from faithfulness_pipeline.judging.offline.rules import extract_claims, judge_claims


def _verdict(claim: str, *context: str) -> tuple[str, str | None]:
    (verdict,) = judge_claims(extract_claims(claim), list(context))
    return verdict.verdict, verdict.reason


@pytest.mark.parametrize(("claim", "passage", "claimed", "stated"), [
    # places
    ("The Eiffel Tower is in Berlin.", "The Eiffel Tower is in Paris.", "Berlin", "Paris"),
    ("埃菲尔铁塔位于柏林。", "埃菲尔铁塔位于巴黎。", "柏林", "巴黎"),
    ("埃菲爾鐵塔位於柏林。", "埃菲尔铁塔位于巴黎。", "柏林", "巴黎"),  # zh-TW against zh-CN
    ("에펠탑은 베를린에 있다.", "에펠탑은 파리에 있다.", "베를린에", "파리에"),
    # names
    ("The novel was written by Charles Dickens in London.", "The novel was written by Jane Austen in London.",
     "Charles Dickens", "Jane Austen"),
    ("这部小说由鲁迅创作。", "这部小说由老舍创作。", "鲁迅", "老舍"),
    ("이 소설은 김영하가 썼다.", "이 소설은 한강이 썼다.", "김영하가", "한강이"),
    # dates
    ("The bridge opened in March 1932.", "The bridge opened in May 1932.", "March", "May"),
    ("大桥于三月通车。", "大桥于五月通车。", "3", "5"),  # months are numbers here: the number rule's
    ("다리는 삼월에 개통되었다.", "다리는 오월에 개통되었다.", "삼월에", "오월에"),
])  # fmt: skip
def test_one_swapped_name_place_or_date_is_a_contradiction_naming_both(
    claim: str, passage: str, claimed: str, stated: str
) -> None:
    verdict, reason = _verdict(claim, "Unrelated words here.", passage)
    assert verdict == "contradicted"
    assert reason in (f"The claim says '{claimed}' where passage 1 says '{stated}'.",
                      f"The claim says {claimed} where passage 1 says {stated}.")


@pytest.mark.parametrize(("claim", "context"), [
    # the claimed name is in the context too: another sentence may say it
    ("The Eiffel Tower is in Paris.", ["The Eiffel Tower is in Paris.", "Berlin has a tower too."]),
    ("The Eiffel Tower is in Berlin.", ["The Eiffel Tower is in Paris.", "Berlin has a tower too."]),
    ("埃菲尔铁塔位于柏林。", ["埃菲尔铁塔位于巴黎。", "柏林也有一座塔。"]),
    ("에펠탑은 베를린에 있다.", ["에펠탑은 파리에 있다.", "베를린에도 탑이 있다."]),
    # a paraphrase's choice of an ordinary word is no swapped name
    ("The tower is very tall and old.", ["The tower is very high and old."]),
    # a negation is the negation rule's, not a swap
    ("The museum is open on Mondays.", ["The museum is closed on Mondays."]),
])  # fmt: skip
def test_what_is_no_swap_is_not_contradicted_as_one(claim: str, context: list[str]) -> None:
    verdict, reason = _verdict(claim, *context)
    assert verdict != "contradicted" or "says '" not in (reason or ""), (verdict, reason)


@pytest.mark.parametrize(("claim", "passage"), [
    ("The Eiffel Tower is 300 metres tall.", "The Eiffel Tower is 330 metres tall."),
    ("埃菲尔铁塔高300米。", "埃菲尔铁塔高330米。"),
    ("에펠탑의 높이는 300미터이다.", "에펠탑의 높이는 330미터이다."),
])  # fmt: skip
def test_a_flat_number_is_not_a_nearby_one(claim: str, passage: str) -> None:
    assert _verdict(claim, passage) == ("contradicted", "The claim says 300 where passage 0 says 330.")


@pytest.mark.parametrize(("claim", "passage"), [
    ("The Eiffel Tower is about 300 metres tall.", "The Eiffel Tower is 330 metres tall."),
    ("The Eiffel Tower is nearly 300 metres tall.", "The Eiffel Tower is 290 metres tall."),
    ("埃菲尔铁塔高约300米。", "埃菲尔铁塔高330米。"),
    ("埃菲尔铁塔高300米左右。", "埃菲尔铁塔高330米。"),
    ("에펠탑의 높이는 약 300미터이다.", "에펠탑의 높이는 330미터이다."),
    ("에펠탑의 높이는 300미터 정도이다.", "에펠탑의 높이는 330미터이다."),
])  # fmt: skip
def test_an_approximate_number_may_stand_for_a_nearby_one_and_the_verdict_says_so(claim: str, passage: str) -> None:
    verdict, reason = _verdict(claim, passage)
    assert verdict == "supported"
    assert reason is not None and "approximates" in reason and "within 10 %" in reason


def test_the_readme_example_is_right_with_the_offline_judge() -> None:
    import polars as pl

    df = pl.DataFrame({
        "conversation_id": ["c1", "c2", "c3"],
        "output": ["The Eiffel Tower is 330 metres tall.", "埃菲尔铁塔位于柏林。", "에펠탑은 베를린에 있다."],
        "context": [["The Eiffel Tower is 330 metres tall."], ["埃菲尔铁塔位于巴黎。"], ["에펠탑은 파리에 있다."]],
    })  # fmt: skip
    scored = score_frame(df).sort("conversation_id")
    assert scored.get_column("hallucination_score").to_list() == [0.0, 1.0, 1.0]
    assert "柏林" in scored.get_column("hallucination_reason")[1]
