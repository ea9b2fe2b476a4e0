"""The SQLite result store: keys, codecs, bulk lookups, and two writer processes at once."""

from __future__ import annotations

import multiprocessing
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from faithfulness_pipeline.core.port import ClaimVerdict, Usage
from faithfulness_pipeline.judging.store.codec import decode_claims, decode_verdicts, encode_claims, encode_verdicts
from faithfulness_pipeline.judging.store.keys import KeyMaker
from faithfulness_pipeline.judging.store.sqlite import ResultStore


def test_keys_separate_fields_and_settings() -> None:
    k = KeyMaker("extract", "x123", "openai/m")
    assert k.key("ab", "c") != k.key("a", "bc")
    assert k.key(None, "a") != k.key("", "a")
    assert k.key("q", "a") == KeyMaker("extract", "x123", "openai/m").key("q", "a")
    assert k.key("q", "a") != KeyMaker("extract", "x124", "openai/m").key("q", "a")
    assert len(k.key("q", "a")) == 16
    assert k.key_of_lists(["a", "b"], ["c"]) != k.key_of_lists(["a"], ["b", "c"])
    assert k.key_of_lists(["a b"], ["c"]) != k.key_of_lists(["a", "b"], ["c"])
    # Texts holding the separator cannot be confused with more texts.
    assert k.key_of_lists(["a\x00b"], ["c"]) != k.key_of_lists(["a", "b"], ["c"])
    assert k.key_of_lists(["a"], ["b\x00", "c"]) != k.key_of_lists(["a"], ["b", "\x00c"])
    assert k.key_of_lists([], ["a"]) != k.key_of_lists(["a"], [])
    assert k.key_of_lists("ab", None) != k.key_of_lists(["ab"], None)


def test_batched_pair_keys_equal_single_keys() -> None:
    k = KeyMaker("verdict", "v1", "openai/m")
    pairs = [((f"claim {i}.", "서울은 크다."), (f"passage {i} " * 300, "臺北。", "x\x00y")) for i in range(1200)]
    pairs += [((), ()), (("bad \ud800 text",), ("p",))]
    assert k.keys_of_pairs(pairs) == [k.key_of_lists(a, b) for a, b in pairs]
    assert k.keys_of_pairs(pairs[:3]) == [k.key_of_lists(a, b) for a, b in pairs[:3]]
    assert len(set(k.keys_of_pairs(pairs))) == len(pairs)


def test_codecs_round_trip() -> None:
    usage = Usage(llm_calls=0.25, prompt_tokens=1234, completion_tokens=56, cost_usd=0.000123)
    claims = ("臺北的人口約二百五十萬。", "서울은 수도이다.", 'He said "hi" \\ bye.')
    assert decode_claims(encode_claims(claims, usage)) == (claims, usage)
    verdicts = (
        ClaimVerdict("supported", False, None, 0),
        ClaimVerdict("contradicted", False, "文中寫的是 1998 年。", 2),
        ClaimVerdict("unsupported", True, "not stated", None),
    )
    unpriced = Usage(llm_calls=1 / 3, prompt_tokens=1, completion_tokens=2, cost_usd=None)
    assert decode_verdicts(encode_verdicts(verdicts, unpriced, True)) == (verdicts, unpriced, True)
    assert decode_claims(encode_claims((), usage)) == ((), usage)
    assert decode_verdicts(encode_verdicts((), usage, False)) == ((), usage, False)


@pytest.mark.parametrize("value", ["{}", "[1,2]", '"x"', "not json", '[0.1,1,2,null,0,"S",0]', '[0.1,1,2,null,0,"X",0,null,null]'])
def test_values_that_are_not_stored_results_raise(value: str) -> None:
    with pytest.raises((ValueError, KeyError, IndexError)):
        decode_verdicts(value)


def test_put_and_get_many_in_chunks(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "sub" / "results.sqlite")
    k = KeyMaker("extract", "v")
    keys = [k.key(str(i)) for i in range(2500)]
    store.put_many((key, "extract", f"value-{i}") for i, key in enumerate(keys[:2000]))
    found = store.get_many(keys)
    assert len(found) == 2000
    assert found[keys[1999]] == "value-1999" and keys[2000] not in found
    store.put_many([(keys[0], "extract", "replaced")])
    assert store.get_many([keys[0]]) == {keys[0]: "replaced"}
    assert store.count() == 2000
    assert store.get_many([]) == {}
    store.close()
    conn = sqlite3.connect(tmp_path / "sub" / "results.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_committed_rows_survive_without_close(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    writer = ResultStore(path)
    writer.put_many([(b"k" * 16, "verdict", "v1")])
    reader = ResultStore(path)  # another connection sees the commit at once, before any close
    assert reader.get_many([b"k" * 16]) == {b"k" * 16: "v1"}
    writer.close()
    reader.close()


def _writer(path: str, start: int, n: int) -> None:
    store = ResultStore(path)
    k = KeyMaker("extract", "v")
    for base in range(start, start + n, 50):
        store.put_many((k.key(str(i)), "extract", str(i)) for i in range(base, base + 50))
    store.close()


def test_two_processes_write_one_store_at_once(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.sqlite")
    ResultStore(path).count()  # create the file first, as a scoring run would
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, s, 1500)) for s in (0, 1500)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    store = ResultStore(path)
    k = KeyMaker("extract", "v")
    found = store.get_many([k.key(str(i)) for i in range(3000)])
    assert len(found) == 3000
    assert all(found[k.key(str(i))] == str(i) for i in range(3000))
    store.close()


def test_bulk_lookup_speed_is_reported(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "speed.sqlite")
    k = KeyMaker("extract", "v")
    keys = [k.key(str(i)) for i in range(50_000)]
    value = encode_claims(["a claim."], Usage(0.1, 100, 10, None))
    store.put_many((key, "extract", value) for key in keys)
    start = time.perf_counter()
    found = store.get_many(keys)
    values = [decode_claims(found[key]) for key in keys]
    elapsed = time.perf_counter() - start
    assert len(values) == 50_000
    print(f"get_many + decode: {50_000 / elapsed:,.0f} results/s")
    store.close()


def _keys_in_child(conn: Any) -> None:
    k = KeyMaker("verdict", "v1", "openai/m")
    pairs = [((f"claim {i}.",), (f"passage {i} " * 300,)) for i in range(600)]
    conn.send(k.keys_of_pairs(pairs) == [k.key_of_lists(a, b) for a, b in pairs])


def test_batched_keys_work_in_a_forked_child() -> None:
    k = KeyMaker("verdict", "v1", "openai/m")
    k.keys_of_pairs([((f"c{i}",), ("p" * 3000,)) for i in range(600)])  # hashed in the parent first
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_keys_in_child, args=(child,))
    proc.start()
    assert parent.poll(30) and parent.recv() is True  # a hang here: state the child cannot use
    proc.join(30)
    assert proc.exitcode == 0
