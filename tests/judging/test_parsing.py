"""Strict, item-by-item reading of judge replies, with salvage of what validated."""

from __future__ import annotations

import json

import pytest

from faithfulness_pipeline.core.port import ClaimVerdict
from faithfulness_pipeline.judging.llm.parsing import (
    MISSING,
    parse_code,
    parse_extract_reply,
    parse_verdict_reply,
    read_members,
)

SENTENCES = {
    "a1": ("Paris is in France.", "서울은 한국의 수도이다.", "Is that all?"),
    "a2": ("臺北的人口約二百五十萬。",),
}


def test_extract_reply_rebuilds_claims_from_numbers_and_texts() -> None:
    body = json.dumps({"a1": [1, " 서울은 수도이다. ", "서울은 한국에 있다."], "a2": []}, ensure_ascii=False)
    for text in (body, f"```json\n{body}\n```", f"Here you go:\n{body}\nThanks"):
        parsed = parse_extract_reply(text, SENTENCES)
        assert parsed.ok == {"a1": ("Paris is in France.", "서울은 수도이다.", "서울은 한국에 있다."), "a2": ()}
        assert parsed.failed == {} and parsed.complete
        assert set(parsed.weights) == {"a1", "a2"}
    # Sentence 3 (a question) was left out.
    parsed = parse_extract_reply('{"a1": [1, 2], "a2": [1]}', SENTENCES)
    assert parsed.ok == {"a1": SENTENCES["a1"][:2], "a2": SENTENCES["a2"]}


@pytest.mark.parametrize("claim", ["1990", "2", " 3 ", "٣", "00"])
def test_a_written_out_claim_of_digits_is_a_claim_never_a_sentence_number(claim: str) -> None:
    # JSON strings are claims and JSON integers are sentence numbers: the type decides, not the text.
    # "2" is also a valid sentence number of a1: it still is the claim "2".
    parsed = parse_extract_reply(json.dumps({"a1": [1, claim], "a2": [claim]}), SENTENCES)
    assert parsed.failed == {}
    assert parsed.ok == {"a1": (SENTENCES["a1"][0], claim.strip()), "a2": (claim.strip(),)}


def test_extract_reply_keeps_valid_items_and_names_the_rest() -> None:
    one = ("s.",)
    three = ("s1.", "s2.", "s3.")
    sentences = {"a1": three, "a2": one, "a3": one, "a4": one, "a5": one, "a6": three, "a7": three, "a8": one}
    text = json.dumps(
        {"a1": ["ok claim", 3], "a3": [""], "a4": "not a list", "a5": [1.5], "a6": [2, 1], "a7": [4],
         "a8": [True], "zz": ["invented"]}
    )
    parsed = parse_extract_reply(text, sentences)
    assert parsed.ok == {"a1": ("ok claim", "s3.")}
    assert parsed.failed["a2"] == MISSING
    assert parsed.failed["a3"] == "a claim is empty"
    for key in ("a4", "a5", "a8"):
        assert parsed.failed[key] == "claims are not a list of sentence numbers and texts"
    assert parsed.failed["a6"] == "sentence numbers are repeated or out of order"
    assert parsed.failed["a7"] == "sentence 4 does not exist (the answer has 3)"
    assert parsed.unknown_ids == ("zz",)
    assert "out of order" in parse_extract_reply('{"a1": [1, 1]}', {"a1": three}).failed["a1"]
    assert "does not exist" in parse_extract_reply('{"a1": [0]}', {"a1": three}).failed["a1"]


def test_a_duplicated_id_is_a_failure_not_a_guess() -> None:
    parsed = parse_extract_reply('{"a1": ["x"], "a1": ["y"], "a2": ["z"]}', {"a1": ("s",), "a2": ("s",)})
    assert parsed.ok == {"a2": ("z",)}
    assert "more than once" in parsed.failed["a1"]


def test_a_reply_cut_short_keeps_the_members_before_the_cut() -> None:
    full = json.dumps({"a1": [1], "a2": ["two.", "three."], "a3": [1]})
    cut = full[: full.index("three") + 2]
    members, complete = read_members(cut)
    assert [m[0] for m in members] == ["a1"] and not complete
    parsed = parse_extract_reply(cut, {"a1": ("one.",), "a2": ("x",), "a3": ("y",)})
    assert parsed.ok == {"a1": ("one.",)}
    assert parsed.failed["a2"] == parsed.failed["a3"] == "the reply was cut short before this item"
    assert not parsed.complete


@pytest.mark.parametrize("text", ["", "Sure! the statements look fine.", "[1, 2]", "{not json"])
def test_a_reply_without_an_object_fails_every_item(text: str) -> None:
    parsed = parse_extract_reply(text, {"a1": ("s",), "a2": ("s",)})
    assert parsed.ok == {}
    assert set(parsed.failed) == {"a1", "a2"}


def test_empty_object_reply_misses_everything() -> None:
    parsed = parse_extract_reply("{}", {"a1": ("s",)})
    assert parsed.failed == {"a1": MISSING} and parsed.complete


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("S0", ClaimVerdict("supported", False, None, 0)),
        ("S", ClaimVerdict("supported", False, None, None)),
        ("S?2", ClaimVerdict("supported", True, None, 2)),
        ("C1|Passage 1 says 1998.", ClaimVerdict("contradicted", False, "Passage 1 says 1998.", 1)),
        ("U|No passage mentions it.", ClaimVerdict("unsupported", False, "No passage mentions it.", None)),
        ("U?|미래 가격은 언급되지 않음.", ClaimVerdict("unsupported", True, "미래 가격은 언급되지 않음.", None)),
        (" c 0 | 文中寫的是 1998 年。|x ", ClaimVerdict("contradicted", False, "文中寫的是 1998 年。|x", 0)),
        ("S1|fine anyway", ClaimVerdict("supported", False, "fine anyway", 1)),
    ],
)
def test_verdict_codes(code: str, expected: ClaimVerdict) -> None:
    assert parse_code(code, 3) == expected


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("X0", "not a verdict code"),
        ("supported", "not a verdict code"),
        ("U", "needs a reason"),
        ("C2|  ", "needs a reason"),
        ("S3", "does not exist"),
    ],
)
def test_invalid_verdict_codes(code: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_code(code, 3)


def test_verdict_reply_needs_exactly_one_code_per_claim() -> None:
    reply = json.dumps(
        {
            "a1": ["S0", "C1|no"],
            "a2": ["S0"],
            "a3": ["S0", "S9"],
            "a4": [["S0"]],
            "a5": ["U?|x", "S?0", "S"],
        }
    )
    expected = {"a1": (2, 2), "a2": (2, 2), "a3": (2, 2), "a4": (1, 2), "a5": (3, 1)}
    parsed = parse_verdict_reply(reply, expected)
    assert set(parsed.ok) == {"a1", "a5"}
    assert parsed.ok["a1"][1] == ClaimVerdict("contradicted", False, "no", 1)
    assert parsed.failed["a2"] == "1 verdicts for 2 claims"
    assert "does not exist" in parsed.failed["a3"]
    assert "not a list of code strings" in parsed.failed["a4"]


def test_nesting_is_bounded_and_brackets_inside_strings_do_not_count() -> None:
    from faithfulness_pipeline.judging.llm.parsing import MAX_DEPTH, read_members

    assert read_members('{"a": ' + "[" * 50_000 + "]" * 50_000 + "}") == ([], False)
    assert read_members('{"a": ' + "{" * (MAX_DEPTH + 1) + "}" * (MAX_DEPTH + 1) + "}") == ([], False)
    fine = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    assert read_members('{"a": ' + fine + "}")[1] is True
    quoted = '{"a": ["S1|' + "[" * 500 + '\\" {{{ 「括号」 [괄호"]}'
    members, complete = read_members(quoted)
    assert complete and members[0][1][0].startswith("S1|[[[")
