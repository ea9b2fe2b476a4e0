"""The blank test over a column agrees with Python's; aligned store lookups give one value per key."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from faithfulness_pipeline.core.keys import PYTHON_WHITESPACE, is_blank
from faithfulness_pipeline.judging.store.sqlite import ResultStore

_TEXTS = ["a", "", " ", "臺北。", "서울은 크다.", "x\x00y", "\x00", 'q "u" \\ n\n', "é" * 3000, "\u3000", "\x1c"]


def test_whitespace_set_is_pythons() -> None:
    assert set(PYTHON_WHITESPACE) == {chr(c) for c in range(0x110000) if chr(c).isspace()}
    values = [None, *_TEXTS, " \t\u2028\u00a0", "\u200b"]
    got = pl.select(is_blank(pl.Series(values, dtype=pl.String))).to_series().to_list()
    assert got == [v is None or not v.strip() for v in values]


def test_aligned_lookup_gives_one_value_per_key_in_order(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "s.sqlite")
    keys = [n.to_bytes(2, "big") * 8 for n in range(2000)]
    store.put_many((k, "extract", f"v{n}") for n, k in enumerate(keys) if n % 3)
    asked = [keys[5], keys[3], keys[5], keys[1999], keys[0], *keys[:1500]]
    assert store.get_aligned(asked) == [None if keys.index(k) % 3 == 0 else f"v{keys.index(k)}" for k in asked]
    store.close()
