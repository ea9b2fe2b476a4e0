"""One suite, both result-store backends: a SQLite file and a real PostgreSQL server (a throwaway cluster
started by the test on a Unix socket). Same keys, values, replacement, leases and scoring behaviour;
bad URLs, a database that is down, a refused password and a store of another version give one line."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.judging.store.open import open_store
from faithfulness_pipeline.judging.store.protocol import Store
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge, typical_frame
from tests.postgres_cluster import PASSWORD, Cluster

KEY_ENV = "FP_TEST_BACKEND_KEY"


@pytest.fixture
def spec(new_store: Callable[[str], str]) -> str:
    """A fresh, empty store of each backend, as the user names it (a path, or a URL)."""
    return new_store("store")


def _keys(n: int, tag: bytes = b"k") -> list[bytes]:
    return [tag + i.to_bytes(15, "big") for i in range(n)]


def test_values_round_trip_and_are_replaced(spec: str) -> None:
    store = open_store(spec)
    keys = _keys(2500)  # several lookup chunks
    store.put_many([(k, "extract", f"[{i}]") for i, k in enumerate(keys)])
    store.put_many([(keys[0], "row", b"\x00\xffbytes stay bytes")])
    store.put_many([(keys[1], "extract", "[\"replaced\", \"中文\", \"한국어\"]")])
    got = store.get_aligned([keys[0], keys[1], keys[2], b"absent-key-00000", keys[2]])
    assert got == [b"\x00\xffbytes stay bytes", "[\"replaced\", \"中文\", \"한국어\"]", "[2]", None, "[2]"]
    assert store.count() == 2500
    assert len(store.get_many(keys)) == 2500
    store.close()
    again = open_store(spec)  # what was committed is there for a new connection
    assert again.get_aligned([keys[2500 - 1]]) == ["[2499]"]
    again.close()


def test_leases_go_to_one_owner_until_released_or_expired(spec: str) -> None:
    a, b = open_store(spec), open_store(spec)
    keys = _keys(5)
    assert a.claim(keys[:3], "worker-a", 60) == set(keys[:3])
    assert b.claim(keys, "worker-b", 60) == set(keys[3:])  # a holds the first three
    assert a.claim(keys[:1], "worker-a", 60) == {keys[0]}  # renewing one's own
    a.release(keys[:1], "worker-a")
    assert b.claim(keys[:2], "worker-b", 60) == {keys[0]}  # released: free; the second is still a's
    assert a.claim([keys[2]], "worker-a", 0.01) == {keys[2]}
    time.sleep(0.05)
    assert b.claim([keys[2]], "worker-b", 60) == {keys[2]}  # expired: taken over
    a.close()
    b.close()


def test_concurrent_writers_lose_nothing(spec: str) -> None:
    stores = [open_store(spec) for _ in range(3)]
    errors: list[BaseException] = []

    def write(store: Store, tag: bytes) -> None:
        try:
            for start in range(0, 600, 50):
                store.put_many([(k, "verdict", "[1]") for k in _keys(600, tag)[start : start + 50]])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(s, t)) for s, t in zip(stores, (b"a", b"b", b"c"), strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert stores[0].count() == 1800
    for store in stores:
        store.close()


def _frame(n: int) -> pl.DataFrame:
    return typical_frame(n, seed=9, ids="c{:03d}")


def _score(frame: pl.DataFrame, settings: JudgeSettings) -> pl.DataFrame:
    return score_frame(frame, make_judge(settings), ScoringConfig(chunk_rows=9))  # closes the judge


def test_a_scoring_run_resumes_and_re_runs_free_on_either_backend(spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-backend")
    frame = _frame(30)
    with FakeLLMServer(ScriptedJudge()) as server:
        settings = JudgeSettings(model="openai/fake-judge", api_base=server.base_url, api_key_env=KEY_ENV,
                                 store=spec, timeout_s=5)
        first_part = _score(frame.head(12), settings)
        asked = server.stats().requests
        whole = _score(frame, settings)  # pays only for the 18 rows the store lacks
        assert server.stats().requests - asked > 0
        assert whole.filter(pl.col(S.ROW_KEY).is_in(first_part.get_column(S.ROW_KEY).implode())).get_column(
            S.RESULT_SOURCE).unique().to_list() == ["store"]
        server.reset_stats()
        again = _score(frame, settings)
        assert server.stats().requests == 0
    assert set(again.get_column(S.RESULT_SOURCE)) == {"store"}
    assert again.drop(S.RUN_COLUMNS).equals(whole.drop(S.RUN_COLUMNS))


def test_two_workers_at_once_ask_each_content_about_once(spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs of the same rows started together against one store: leases keep the second from paying
    for what the first is asking (and the other way round)."""
    monkeypatch.setenv(KEY_ENV, "sk-backend")
    frame = _frame(120)
    script = ScriptedJudge()
    from faithfulness_pipeline.testing.fakellm import Latency

    with FakeLLMServer(script, latency=Latency(base_s=0.05)) as server:
        settings = JudgeSettings(model="openai/fake-judge", api_base=server.base_url, api_key_env=KEY_ENV,
                                 store=spec, timeout_s=10, max_concurrency=2, max_items_per_pack=8)
        tables: list[pl.DataFrame] = []
        threads = [threading.Thread(target=lambda: tables.append(_score(frame, settings))) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    items = sum(len(call.texts) for call in script.calls)
    one_run = 120 + 120  # every row: one extraction item, one verdict item
    assert items <= 1.05 * one_run, items
    assert len(tables) == 2 and tables[0].drop(S.RUN_COLUMNS).sort(S.ROW_KEY).equals(
        tables[1].drop(S.RUN_COLUMNS).sort(S.ROW_KEY))


# ------------------------------------------------------------------------------------ errors, one line


def _one_line_error(spec: str) -> str:
    with pytest.raises(ConfigError) as caught:
        open_store(spec)
    message = str(caught.value)
    assert "\n" not in message and PASSWORD not in message
    return message


def test_bad_urls_and_unreachable_databases_are_one_line(postgres: Cluster, tmp_path: Path) -> None:
    assert "unknown scheme 'mysql'" in _one_line_error("mysql://u:p@host/db")
    assert "password authentication failed" in _one_line_error(postgres.url(password="wrong-password"))
    assert 'database "missing" does not exist' in _one_line_error(postgres.url(database="missing"))
    down = f"postgresql://fp:{PASSWORD}@/fp?host={tmp_path}"  # no server on that socket
    assert "cannot reach the result store" in _one_line_error(down)
    assert "***" in _one_line_error(down)


def test_a_store_of_another_version_is_refused_in_one_line(postgres: Cluster) -> None:
    postgres.psql("CREATE DATABASE old_version")
    url = postgres.url(database="old_version")
    open_store(url).close()
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE fp_meta SET value = '0' WHERE name = 'schema_version'")
    assert "is a result store of schema 0, this version needs" in _one_line_error(url)


def test_leases_of_a_killed_run_on_this_machine_are_taken_over_at_once(spec: str) -> None:
    """A run killed with SIGKILL gives nothing back; its re-run on the same machine must not wait for its
    leases to run out."""
    import socket
    import subprocess
    import sys

    from faithfulness_pipeline.judging.offline.judge import OfflineJudge
    from faithfulness_pipeline.judging.stack import JudgeStack

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead = f"{socket.gethostname()}:{done.stdout.strip()}:gone"
    store = open_store(spec)
    keys = _keys(4)
    assert store.claim(keys[:2], dead, 600) == set(keys[:2])
    assert store.claim(keys[2:], f"{socket.gethostname()}:1:init", 600) == set(keys[2:])  # pid 1 lives
    judge = JudgeStack(OfflineJudge(), store)
    assert judge._leases is not None and judge._leases.claim(keys) == set(keys[:2])
    asyncio.run(judge.aclose())
