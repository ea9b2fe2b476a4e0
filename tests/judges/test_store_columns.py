"""Column-wise keys and decoding of stored results agree item for item with the per-item ones."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl

from faithfulness_pipeline.core.judge import ClaimVerdict, Usage
from faithfulness_pipeline.core.keys import PYTHON_WHITESPACE, is_blank
from faithfulness_pipeline.judges.store import (
    KeyMaker,
    ResultStore,
    decode_claims,
    decode_claims_column,
    decode_verdicts,
    decode_verdicts_column,
    encode_claims,
    encode_verdicts,
    extract_content,
    pair_content,
)

_TEXTS = ["a", "", " ", "臺北。", "서울은 크다.", "x\x00y", "\x00", 'q "u" \\ n\n', "é" * 3000, "\u3000", "\x1c"]


def test_whitespace_set_is_pythons() -> None:
    assert set(PYTHON_WHITESPACE) == {chr(c) for c in range(0x110000) if chr(c).isspace()}
    values = [None, *_TEXTS, " \t\u2028\u00a0", "\u200b"]
    got = pl.select(is_blank(pl.Series(values, dtype=pl.String))).to_series().to_list()
    assert got == [v is None or not v.strip() for v in values]


def test_column_keys_equal_item_keys() -> None:
    rng = random.Random(7)
    keys = KeyMaker("verdict", "v1", "openai/m")
    pairs = [([rng.choice(_TEXTS) for _ in range(rng.randint(0, 4))], [rng.choice(_TEXTS) for _ in range(rng.randint(0, 4))])
             for _ in range(1500)]
    heads, tails = pair_content(pl.col("c"), pl.col("x"))
    frame = pl.DataFrame({"c": [a for a, _ in pairs], "x": [b for _, b in pairs]}, schema={
        "c": pl.List(pl.String), "x": pl.List(pl.String)}).select(heads.alias("h"), tails.alias("t"))
    plain = [n for n in range(len(pairs)) if frame["h"][n] is not None and frame["t"][n] is not None]
    assert 0 < len(plain) < len(pairs)  # some rows hold NULs: those take the general layout
    rows = frame[plain]
    assert keys.keys_of_texts(rows["h"], rows["t"]) == [keys.key_of_lists(*pairs[n]) for n in plain]
    small = rows.head(5)  # a column of a few rows: buffers cut short
    assert keys.keys_of_texts(small["h"], small["t"]) == [keys.key_of_lists(*pairs[n]) for n in plain[:5]]

    answers = KeyMaker("extract", "x1", "openai/m")
    items = [(rng.choice([None, *_TEXTS]), rng.choice(_TEXTS[:5] + _TEXTS[7:])) for _ in range(700)]
    frame = pl.DataFrame({"q": [q for q, _ in items], "a": [a for _, a in items]}, schema={"q": pl.String, "a": pl.String})
    question = pl.when(is_blank(pl.col("q"))).then(pl.lit(None, dtype=pl.String)).otherwise(pl.col("q"))
    content = frame.select(extract_content(question, pl.col("a"))).to_series()
    expected = [answers.key(q if q is not None and q.strip() else None, a) for q, a in items]
    assert answers.keys_of_texts(content) == expected


def test_column_decoding_equals_item_decoding() -> None:
    usages = [Usage(1 / 3, 1234, 56, 0.000123 / 7), Usage(0.03125, 0, 0, None), Usage(1.0, 2, 3, 0.0)]
    claims = [("臺北的人口約二百五十萬。", 'He said "hi" \\ bye.'), ("1.5", "null", "true"), ("x",)]
    values = [encode_claims(c, u) for c, u in zip(claims, usages, strict=True)]
    column = decode_claims_column(pl.Series([values[0], None, values[1], values[2], '[1,2,3]'], dtype=pl.String))
    assert column is not None
    rows = column.to_dicts()
    assert rows[1]["claims"] is None and rows[4]["claims"] is None  # not stored; too short to be ours
    for row, value in zip([rows[0], rows[2], rows[3]], values, strict=True):
        found, usage = decode_claims(value)
        assert tuple(row["claims"]) == found
        assert Usage(row["llm_calls"], row["prompt_tokens"], row["completion_tokens"], row["cost_usd"]) == usage

    verdicts = [
        (ClaimVerdict("supported", False, None, 0), ClaimVerdict("contradicted", True, "文中寫的是 1998 年。", None)),
        (ClaimVerdict("unsupported", False, "not stated", 3),),
    ]
    values = [encode_verdicts(verdicts[0], usages[0], True), encode_verdicts(verdicts[1], usages[1], False)]
    bad_letter = values[1].replace('"U"', '"X"')
    column = decode_verdicts_column(
        pl.Series([values[0], values[1], values[1], None, bad_letter], dtype=pl.String),
        pl.Series([2, 1, 2, 1, 1], dtype=pl.UInt32),
    )
    assert column is not None
    rows = column.to_dicts()
    assert [r["verdicts"] is None for r in rows] == [False, False, True, True, True]  # wrong count, absent, unreadable
    for row, value in zip(rows[:2], values, strict=True):
        found, usage, cut = decode_verdicts(value)
        got = tuple(ClaimVerdict(v["verdict"], v["speculative"], v["reason"], v["evidence_index"]) for v in row["verdicts"])
        assert got == found
        assert Usage(row["llm_calls"], row["prompt_tokens"], row["completion_tokens"], row["cost_usd"]) == usage
        assert row["context_truncated"] is cut
    assert decode_claims_column(pl.Series(["not json"], dtype=pl.String)) is None


def test_aligned_lookup_gives_one_value_per_key_in_order(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "s.sqlite")
    keys = [n.to_bytes(2, "big") * 8 for n in range(2000)]
    store.put_many((k, "extract", f"v{n}") for n, k in enumerate(keys) if n % 3)
    asked = [keys[5], keys[3], keys[5], keys[1999], keys[0], *keys[:1500]]
    assert store.get_aligned(asked) == [None if keys.index(k) % 3 == 0 else f"v{keys.index(k)}" for k in asked]
    store.close()
