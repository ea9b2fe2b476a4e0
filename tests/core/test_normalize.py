"""Input normalisation (SPEC §1) and context resolution (SPEC §2)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from faithfulness_pipeline import ColumnMap, InputError, ScoringConfig
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.keys import KeyHashes, KeyRegistry, key_hashes
from faithfulness_pipeline.core.normalize import prepare

MESSAGE = pl.Struct({"role": pl.String, "content": pl.String, "tool_call_id": pl.String, "name": pl.String})


def _chat(rows: list[list[dict[str, object]]], **extra: list[object]) -> pl.DataFrame:
    full = [[{"role": None, "content": None, "tool_call_id": None, "name": None, **m} for m in r] for r in rows]
    return pl.DataFrame({"messages": full, **extra}, schema_overrides={"messages": pl.List(MESSAGE)})


def test_missing_answer_column_lists_columns_and_the_option() -> None:
    df = pl.DataFrame({"answer_text": ["x"], "ctx": [["y"]]})
    with pytest.raises(InputError) as info:
        prepare(df, ScoringConfig())
    message = str(info.value)
    assert "answer_text (String)" in message and "ctx (List(String))" in message
    assert "--output-col" in message and "--messages-col" in message


def test_column_mapping() -> None:
    df = pl.DataFrame({"id": ["k1"], "resp": ["A."], "q": ["Q?"], "docs": [["d"]]})
    cfg = ScoringConfig(columns=ColumnMap(output="resp", input="q", context="docs", key="id"))
    out = prepare(df, cfg)
    assert out.row(0, named=True)[S.ANSWER] == "A."
    assert out[S.QUESTION][0] == "Q?" and out[S.CONTEXT][0].to_list() == ["d"] and out[S.ROW_KEY][0] == "k1"


@pytest.mark.parametrize(("column", "values", "needle"), [
    ("output", [1], "column 'output' (answer) has type Int64"),
    ("context", [3], "column 'context' (context) has type Int64"),
    ("context", [{"a": "b"}], "column 'context' (context) has type Struct"),
    ("input", [1.5], "column 'input' (input) has type Float64"),
])
def test_wrong_types_name_the_column_and_type(column: str, values: list[object], needle: str) -> None:
    data: dict[str, list[object]] = {"output": ["A."], column: values}
    with pytest.raises(InputError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        prepare(pl.DataFrame(data), ScoringConfig())


def test_context_as_one_string_is_one_passage() -> None:
    out = prepare(pl.DataFrame({"output": ["A."], "context": ["one passage"]}), ScoringConfig())
    assert out[S.CONTEXT][0].to_list() == ["one passage"]


@pytest.mark.parametrize("blank", [None, "", "  ", "\u3000", "\u00a0\t\n"])
def test_null_and_blank_passages_are_skipped_and_clean_cells_kept_as_they_are(blank: str | None) -> None:
    # Ideographic and no-break spaces are blank too: zh and ko documents carry them.
    df = pl.DataFrame({"output": ["A.", "B.", "C.", "D."],
                       "context": [[" one ", blank, "two"], [blank], None, ["三 ", "세"]]})
    got = prepare(df, ScoringConfig())[S.CONTEXT].to_list()
    assert got == [[" one ", "two"], [], [], ["三 ", "세"]]
    clean = df.filter(pl.col("output") == "D.")
    assert prepare(clean, ScoringConfig())[S.CONTEXT].to_list() == [["三 ", "세"]]


def test_passthrough_columns_keep_their_order_and_values() -> None:
    df = pl.DataFrame({"z": [1], "output": ["A."], "a": ["x"], "m": [2.5]})
    out = prepare(df, ScoringConfig())
    assert out.columns[:4] == ["z", "output", "a", "m"]
    assert out.row(0)[:4] == (1, "A.", "x", 2.5)


def test_keys_conversation_id_plus_turn() -> None:
    df = pl.DataFrame({"conversation_id": ["c", "c"], "turn": [0, 1], "output": ["A.", "B."]})
    assert prepare(df, ScoringConfig())[S.ROW_KEY].to_list() == ["c#0", "c#1"]


def test_duplicate_keys_error_shows_examples() -> None:
    df = pl.DataFrame({"conversation_id": ["a", "b", "a", "c", "b"], "output": ["x"] * 5})
    with pytest.raises(InputError, match=r"2 duplicate row key\(s\), e.g. \['a', 'b'\]"):
        prepare(df, ScoringConfig())


def test_duplicates_across_chunks_are_caught() -> None:
    registry = KeyRegistry()
    prepare(pl.DataFrame({"conversation_id": ["a"], "output": ["x"]}), ScoringConfig(), registry)
    with pytest.raises(InputError, match="duplicate"):
        prepare(pl.DataFrame({"conversation_id": ["a"], "output": ["y"]}), ScoringConfig(), registry)


def test_null_key_is_an_error_naming_rows() -> None:
    df = pl.DataFrame({"conversation_id": ["a", None], "output": ["x", "y"]})
    with pytest.raises(InputError, match=r"null in 1 row\(s\) \(first rows: \[1\]\)"):
        prepare(df, ScoringConfig())


def test_content_hash_keys_are_stable_and_number_repeats() -> None:
    df = pl.DataFrame({"output": ["same", "same", "other"], "context": [["c"], ["c"], ["c"]]})
    keys = prepare(df, ScoringConfig())[S.ROW_KEY].to_list()
    again = prepare(df, ScoringConfig())[S.ROW_KEY].to_list()
    assert keys == again
    assert keys[1] == keys[0] + "~2" and len(keys[0]) == 16 and keys[2] != keys[0]


def test_chat_answer_is_last_assistant_message_with_text() -> None:
    df = _chat([[{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"},
                 {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2"},
                 {"role": "assistant", "content": ""}]])
    row = prepare(df, ScoringConfig()).row(0, named=True)
    assert row[S.ANSWER] == "A2" and row[S.QUESTION] == "Q2"
    assert row["output"] == "A2" and row["input"] == "Q2"  # chat rows show what was judged


def test_all_turns_gives_one_row_per_assistant_turn() -> None:
    df = _chat([[{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"},
                 {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2"}],
                [{"role": "user", "content": "only a question"}]],
               conversation_id=["c1", "c2"])
    out = prepare(df, ScoringConfig(all_turns=True))
    assert out[S.ROW_KEY].to_list() == ["c1@0", "c1@1", "c2"]
    assert out[S.ANSWER].to_list() == ["A1", "A2", None]
    assert out[S.QUESTION].to_list() == ["Q1", "Q2", None]
    assert out[S.ASSISTANT_TURN].to_list() == [0, 1, None]


def test_content_as_list_of_parts() -> None:
    part = pl.Struct({"type": pl.String, "text": pl.String})
    msg = pl.Struct({"role": pl.String, "content": pl.List(part)})
    df = pl.DataFrame({"messages": [[
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "text": None}]},
        {"role": "assistant", "content": [{"type": "text", "text": "It is "}, {"type": "text", "text": "red."}]},
    ]]}, schema={"messages": pl.List(msg)})
    row = prepare(df, ScoringConfig()).row(0, named=True)
    assert row[S.ANSWER] == "It is \nred." and row[S.QUESTION] == "look"


def test_messages_without_roles_or_with_unknown_roles_do_not_crash() -> None:
    df = _chat([[{"content": "no role"}, {"role": "narrator", "content": "x"}, {"role": "assistant", "content": "A."}]])
    assert prepare(df, ScoringConfig()).row(0, named=True)[S.ANSWER] == "A."


def _tool_chat() -> pl.DataFrame:
    call = pl.Struct({"id": pl.String, "type": pl.String,
                      "function": pl.Struct({"name": pl.String, "arguments": pl.String})})
    msg = pl.Struct({"role": pl.String, "content": pl.String, "tool_calls": pl.List(call),
                     "tool_call_id": pl.String, "name": pl.String})
    base = {"content": None, "tool_calls": None, "tool_call_id": None, "name": None}
    messages = [
        {**base, "role": "user", "content": "weather?"},
        {**base, "role": "assistant", "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "weather", "arguments": "{}"}},
            {"id": "t2", "type": "function", "function": {"name": "never_answered", "arguments": "{}"}}]},
        {**base, "role": "tool", "tool_call_id": "t1", "content": json.dumps({"temp": 14})},
        {**base, "role": "tool", "name": "clock", "content": "not json, 10:00"},
        {**base, "role": "assistant", "content": "It is 14 degrees."},
    ]
    return pl.DataFrame({"messages": [messages], "context": [None]},
                        schema={"messages": pl.List(msg), "context": pl.List(pl.String)})


def test_tool_results_render_like_mastra_and_name_tools_by_call_id() -> None:
    row = prepare(_tool_chat(), ScoringConfig()).row(0, named=True)
    assert row[S.CONTEXT] == ['{"tool":"weather","result":{"temp":14}}', '{"tool":"clock","result":"not json, 10:00"}']


def test_context_precedence_hook_static_column_tools() -> None:
    df = _tool_chat().with_columns(pl.lit(["column passage"]).alias("context"))
    assert prepare(df, ScoringConfig())[S.CONTEXT][0].to_list() == ["column passage"]
    static = ScoringConfig(static_context=("static",))
    assert prepare(df, static)[S.CONTEXT][0].to_list() == ["static"]
    hook = ScoringConfig(static_context=("static",), context_hook=lambda row: ["hook", str(len(row["messages"]))])
    assert prepare(df, hook)[S.CONTEXT][0].to_list() == ["hook", "5"]


def test_hook_returning_wrong_type_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="must return a list of strings"):
        prepare(pl.DataFrame({"output": ["A."]}), ScoringConfig(context_hook=lambda row: "oops"))


def test_reserved_column_names_are_refused_with_the_fix() -> None:
    with pytest.raises(InputError, match=r"\['status'\].*Rename or drop"):
        prepare(pl.DataFrame({"output": ["A."], "status": ["x"]}), ScoringConfig())


@pytest.mark.parametrize("text", ["🙂 emoji 😀.", "e\u0301 combining.", "مرحبا بالعالم.", "zero\u200bwidth\x07.",
                                  "日本語の回答です。", "한국어 답변입니다."])
def test_any_unicode_answer_passes_through_unchanged(text: str) -> None:
    assert prepare(pl.DataFrame({"output": [text]}), ScoringConfig())[S.ANSWER][0] == text


def test_key_hashes_answer_membership_like_a_set() -> None:
    import random

    hashes, added, rng = KeyHashes(), set(), random.Random(3)
    for _ in range(200):
        keys = [f"k{rng.randrange(5000)}" for _ in range(rng.randint(0, 300))]
        series = pl.Series(keys, dtype=pl.String)
        assert hashes.contains(key_hashes(series)).to_list() == [k in added for k in keys]
        hashes.add(key_hashes(series))
        added.update(keys)
    assert len(hashes) >= len(added)


def test_content_keys_are_numbered_across_chunks() -> None:
    registry = KeyRegistry()
    first = pl.DataFrame({"output": ["same", "same", "other"], "context": [["c"], ["c"], ["c"]]})
    second = pl.DataFrame({"output": ["same", "new", "other", "new"], "context": [["c"]] * 4})
    a = prepare(first, ScoringConfig(), registry)[S.ROW_KEY].to_list()
    b = prepare(second, ScoringConfig(), registry)[S.ROW_KEY].to_list()
    same, other, new = a[0], a[2], b[1]
    assert a == [same, same + "~2", other]
    assert b == [same + "~3", new, other + "~2", new + "~2"]
    whole = prepare(pl.concat([first, second]), ScoringConfig())[S.ROW_KEY].to_list()
    assert whole == a + b  # chunking changes no key
