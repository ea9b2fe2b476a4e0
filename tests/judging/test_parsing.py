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


def test_extract_reply_rebuilds_claims_from_marks_and_texts() -> None:
    body = json.dumps({"a1": {"1": True, "2": [" 서울은 수도이다. ", "서울은 한국에 있다."], "3": False},
                       "a2": {"1": False}}, ensure_ascii=False)
    for text in (body, f"```json\n{body}\n```", f"Here you go:\n{body}\nThanks"):
        parsed = parse_extract_reply(text, SENTENCES)
        assert parsed.ok == {"a1": ("Paris is in France.", "서울은 수도이다.", "서울은 한국에 있다."), "a2": ()}
        assert parsed.failed == {} and parsed.complete
        assert set(parsed.weights) == {"a1", "a2"}
    # Sentence 3 (a question) has no claim; an empty list says the same as false.
    parsed = parse_extract_reply('{"a1": {"1": true, "2": true, "3": []}, "a2": {"1": true}}', SENTENCES)
    assert parsed.ok == {"a1": SENTENCES["a1"][:2], "a2": SENTENCES["a2"]}


def test_claims_come_back_in_sentence_order_whatever_the_order_of_the_keys() -> None:
    sentences = {"a1": ("One.", "Two.", "Three.", "Four.")}
    reply = '{"a1": {"4": ["Four, split.", "Four, again."], "2": false, "1": true, "3": true}}'
    parsed = parse_extract_reply(reply, sentences)
    assert parsed.ok == {"a1": ("One.", "Three.", "Four, split.", "Four, again.")}


@pytest.mark.parametrize("claim", ["1990", "2", " 3 ", "٣", "00"])
def test_a_written_out_claim_of_digits_is_a_claim_never_a_sentence_number(claim: str) -> None:
    # A written-out claim is a string in a list: it is the claim, whatever it looks like. "2" is also a
    # sentence number of a1: it still is the claim "2".
    reply = {"a1": {"1": True, "2": [claim], "3": False}, "a2": {"1": [claim]}}
    parsed = parse_extract_reply(json.dumps(reply), SENTENCES)
    assert parsed.failed == {}
    assert parsed.ok == {"a1": (SENTENCES["a1"][0], claim.strip()), "a2": (claim.strip(),)}


def test_extract_reply_keeps_valid_items_and_names_the_rest() -> None:
    one = ("s.",)
    three = ("s1.", "s2.", "s3.")
    sentences = {"a1": three, "a2": one, "a3": one, "a4": one, "a5": one, "a6": three, "a7": three, "a8": one,
                 "a9": one, "a10": three}
    text = json.dumps(
        {"a1": {"1": ["ok claim"], "2": False, "3": True}, "a3": {"1": [""]}, "a4": [1], "a5": {"1": 1},
         "a6": {"1": True, "3": True}, "a7": {"1": True, "2": True, "3": True, "4": True}, "a8": {"1": [True]},
         "a9": {"one": True}, "a10": {}, "zz": {"1": ["invented"]}}
    )
    parsed = parse_extract_reply(text, sentences)
    assert parsed.ok == {"a1": ("ok claim", "s3.")}
    assert parsed.failed["a2"] == MISSING
    assert parsed.failed["a3"] == "sentence 1: a claim is empty"
    assert parsed.failed["a4"] == "claims are not an object keyed by sentence number"
    assert parsed.failed["a5"] == "sentence 1 is not true, false or a list of claims"
    assert parsed.failed["a6"] == "sentence 2 missing: every sentence needs true, false or its claims"
    assert parsed.failed["a7"] == "sentence 4 does not exist (the answer has 3)"
    assert parsed.failed["a8"] == "sentence 1: a claim is not a text"
    assert parsed.failed["a9"] == 'key "one" is not a sentence number'
    assert parsed.failed["a10"] == "sentences 1, 2, 3 missing: every sentence needs true, false or its claims"
    assert parsed.unknown_ids == ("zz",)
    assert "does not exist" in parse_extract_reply('{"a1": {"0": true}}', {"a1": three}).failed["a1"]
    for key in ("01", " 1", "1.0", "١"):  # only the numbers as the prompt wrote them
        reply = json.dumps({"a1": {key: True}}, ensure_ascii=False)
        assert "is not a sentence number" in parse_extract_reply(reply, {"a1": one}).failed["a1"]


def test_a_sentence_missing_from_the_reply_fails_its_answer_never_reads_as_no_claim() -> None:
    # What a small model did with many answers in one request: it wrote each answer's first sentence and
    # went on to the next answer. Under the old reply that read as "the other sentences hold no claim".
    sentences = {"a1": ("One.", "Two.", "Three."), "a2": ("Four.", "Five.")}
    parsed = parse_extract_reply('{"a1": {"1": true, "3": true}, "a2": {"1": true, "2": false}}', sentences)
    assert parsed.ok == {"a2": ("Four.",)}
    assert parsed.failed == {"a1": "sentence 2 missing: every sentence needs true, false or its claims"}


def test_a_sentence_given_twice_fails_its_answer_not_read_as_the_last_value() -> None:
    sentences = {"a1": ("One.", "Two."), "a2": ("Three.",)}
    parsed = parse_extract_reply('{"a1": {"1": true, "2": false, "2": true}, "a2": {"1": true}}', sentences)
    assert parsed.ok == {"a2": ("Three.",)}
    assert parsed.failed == {"a1": "sentence 2 is given more than once"}


def test_a_duplicated_id_is_a_failure_not_a_guess() -> None:
    parsed = parse_extract_reply('{"a1": {"1": ["x"]}, "a1": {"1": ["y"]}, "a2": {"1": ["z"]}}',
                                 {"a1": ("s",), "a2": ("s",)})
    assert parsed.ok == {"a2": ("z",)}
    assert "more than once" in parsed.failed["a1"]


def test_a_reply_cut_short_keeps_the_members_before_the_cut() -> None:
    full = json.dumps({"a1": {"1": True}, "a2": {"1": ["two.", "three."]}, "a3": {"1": True}})
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


def test_an_answer_without_sentences_is_an_empty_object() -> None:
    parsed = parse_extract_reply('{"a1": {}}', {"a1": ()})
    assert parsed.ok == {"a1": ()} and parsed.failed == {}


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
        ("C3", "needs a reason"),  # a pointer past the passages does not excuse a missing reason
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
    assert set(parsed.ok) == {"a1", "a3", "a5"}
    assert parsed.ok["a1"][1] == ClaimVerdict("contradicted", False, "no", 1)
    assert parsed.failed["a2"] == "1 verdicts for 2 claims"
    assert parsed.ok["a3"] == (ClaimVerdict("supported", False, None, 0), ClaimVerdict("supported", False, None, None))
    assert parsed.pointers == {"a3": (0, 1)}
    assert "not a list of code strings" in parsed.failed["a4"]


@pytest.mark.parametrize(
    ("code", "passages", "evidence", "repair"),
    [
        ("S0", 1, 0, None),
        ("S1", 1, 0, "only_passage"),  # one passage, counted from 1: there is no other it can name
        ("C?1|Passage 1 says 1998.", 1, 0, "only_passage"),
        ("S2", 1, None, "dropped"),
        ("S2", 3, 2, None),
        ("S3", 3, None, "dropped"),  # counted from 1 or a wrong number: with three passages nobody can tell
        ("U7|not there", 3, None, "dropped"),
        ("S", 2, None, None),
    ],
)
def test_an_evidence_pointer_that_names_no_passage_keeps_its_verdict(
    code: str, passages: int, evidence: int | None, repair: str | None
) -> None:
    from faithfulness_pipeline.judging.llm.parsing import read_code

    verdict, done = read_code(code, passages)
    assert (verdict.evidence, done) == (evidence, repair)
    assert verdict == parse_code(code, passages)
    assert verdict.verdict == {"S": "supported", "C": "contradicted", "U": "unsupported"}[code[0]]
    assert verdict.speculative == ("?" in code)


def test_a_reply_counting_passages_from_one_is_read_whole_and_says_how_often() -> None:
    # The shape of issue 52's error rows: one passage, pointer 1, every other code valid.
    reply = json.dumps({"a1": ["S1", "U|not said"], "a2": ["C1|wrong year", "S0"], "a3": ["S4", "S1"]})
    parsed = parse_verdict_reply(reply, {"a1": (2, 1), "a2": (2, 2), "a3": (2, 3)})
    assert parsed.failed == {} and set(parsed.ok) == {"a1", "a2", "a3"}
    assert [v.evidence for v in parsed.ok["a1"]] == [0, None]
    assert [v.evidence for v in parsed.ok["a2"]] == [1, 0]  # in range: taken as written
    assert [v.evidence for v in parsed.ok["a3"]] == [None, 1]
    assert parsed.pointers == {"a1": (1, 0), "a3": (0, 1)}


def test_nesting_is_bounded_and_brackets_inside_strings_do_not_count() -> None:
    from faithfulness_pipeline.judging.llm.parsing import MAX_DEPTH, read_members

    assert read_members('{"a": ' + "[" * 50_000 + "]" * 50_000 + "}") == ([], False)
    assert read_members('{"a": ' + "{" * (MAX_DEPTH + 1) + "}" * (MAX_DEPTH + 1) + "}") == ([], False)
    fine = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    assert read_members('{"a": ' + fine + "}")[1] is True
    quoted = '{"a": ["S1|' + "[" * 500 + '\\" {{{ 「括号」 [괄호"]}'
    members, complete = read_members(quoted)
    assert complete and members[0][1][0].startswith("S1|[[[")
