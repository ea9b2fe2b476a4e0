"""A result store another process holds locked: replies keep flowing, nothing is asked (or billed) twice.

The lock is held by a real second process (``BEGIN IMMEDIATE`` on the same SQLite file) for longer than the
request timeout, while the CLI scores against the fake server. Store writes wait on their own thread; were
they done on the event loop, the replies in flight would wait with them, time out and be asked again.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from faithfulness_pipeline.core.port import JudgeStats
from faithfulness_pipeline.judging.store.sqlite import ResultStore
from faithfulness_pipeline.judging.stored import StoredResults
from faithfulness_pipeline.judging.tally import Tally
from faithfulness_pipeline.testing.fakellm import FakeLLMServer, Latency
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.reliability.support import KEY_ENV, child_env, cli_command, run_cli, short_rows, store_counts, wait_for

KEY = "sk-locked-store-3b9d1f7a5c2e4680"
# Held past the request timeout and its backstop (1.5 x timeout + 5 s): a stalled event loop shows up as
# requests timed out and asked again.
HOLD_S = 12.0
TIMEOUT_S = 2.0
LATENCY_S = 1.0  # requests are in flight while the first results are kept

_HOLDER = textwrap.dedent("""
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    conn.execute("COMMIT")
""")


def _requests(srv: FakeLLMServer) -> int:
    return srv.stats().requests


def test_a_store_locked_by_another_process_costs_no_request_twice(tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    short_rows(120).write_parquet(src)
    args = ("--chunk-rows", "40", "--max-concurrency", "4", "--timeout", str(TIMEOUT_S))
    # what the rows need, against a store nobody else holds
    with FakeLLMServer(ScriptedJudge(), latency=Latency(base_s=LATENCY_S)) as srv:
        free = run_cli(cli_command(srv, src, tmp_path / "free.parquet", "--store", str(tmp_path / "free.sqlite"),
                                   *args), KEY)
        assert free.returncode == 0, free.stderr
        needed = _requests(srv)
    assert needed > 6

    store = tmp_path / "store.sqlite"
    ResultStore(store).open()  # the file exists (WAL, tables) before the other process locks it
    with FakeLLMServer(ScriptedJudge(), latency=Latency(base_s=LATENCY_S)) as srv:
        cli = subprocess.Popen(cli_command(srv, src, tmp_path / "out.parquet", "--store", str(store), *args),
                               env=child_env(**{KEY_ENV: KEY}), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        # The lock is taken once the first requests are out, before their replies are kept.
        wait_for(lambda: srv.stats().requests >= 1, None, "the first request")
        holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(store), str(HOLD_S)], stdout=subprocess.PIPE,
                                  text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            out, err = cli.communicate(timeout=600)
        finally:
            holder.wait(timeout=60)
        run = subprocess.CompletedProcess(cli.args, cli.returncode, out, err)
        assert run.returncode == 0, run.stderr
        # No reply waited on the lock until its request timed out and was asked again. (Packing depends on
        # timing, so a run may need a request or two fewer than another: never more.)
        assert _requests(srv) <= needed, run.stderr
        assert "write failed" not in run.stderr
        # every result reached the store once the lock was given back: a re-run (same endpoint) asks nothing
        assert sum(store_counts(store).values()) == sum(store_counts(tmp_path / "free.sqlite").values())
        srv.reset_stats()
        again = run_cli(cli_command(srv, src, tmp_path / "again.parquet", "--store", str(store), *args), KEY)
        assert again.returncode == 0 and _requests(srv) == 0, again.stderr


class _LockedStore(ResultStore):
    """A store whose writes fail as a lock held past the busy timeout makes them fail."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.attempts = 0

    def put_many(self, rows: object) -> None:  # type: ignore[override]
        self.attempts += 1
        raise sqlite3.OperationalError("database is locked")


def test_a_lock_past_the_busy_timeout_is_one_line_for_the_run(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    store = _LockedStore(tmp_path / "s.sqlite")
    tally = Tally()
    stored = StoredResults(store, tally)
    rows: Sequence[tuple[bytes, str, str]] = [(bytes([i]), "extract", "{}") for i in range(3)]
    with caplog.at_level("WARNING"):
        for row in rows:
            stored.save_later([row])
            stored.flush()
        stored.close()
    assert store.attempts == 3  # each save tried (after the lock the next may succeed)...
    lines = [r for r in caplog.records if "result store write failed" in r.getMessage()]
    assert len(lines) == 1 and "OperationalError" in lines[0].getMessage()  # ...one line said why
    assert any("result store write failed" in note for note in tally.added_to(JudgeStats()).notes)
