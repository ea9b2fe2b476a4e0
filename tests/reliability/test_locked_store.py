"""Another process holding the result store's write lock (a second run, a ``sqlite3`` shell, a backup)
must not stall the run: replies are read as they come, none times out for waiting on the store, nothing
is asked twice, and every result reaches the store once the lock is free (issue 27, item 7).

Real parts: the CLI as a subprocess, real HTTP to the fake server with a second of latency per reply,
and a second process holding ``BEGIN IMMEDIATE`` on the store file for longer than the request timeout.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from faithfulness_pipeline.testing.fakellm import FakeLLMServer, Latency
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.reliability.support import KEY_ENV, child_env, cli_command, run_cli, short_rows, store_counts, wait_for

KEY = "sk-locked-store-4c2a9e7d1b3f"
#: The request timeout keeps 4 s above the server's 1 s latency: on a loaded CI machine a reply can take
#: over 2 s on its own, and the test must tell a stalled loop from a slow machine.
TIMEOUT = "5"
HOLD_S = 15  # three times the request timeout, far shorter than the store's busy timeout
#: Holds the store's write lock for HOLD_S seconds once it has it, and says so on stdout.
_HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
"""


def test_a_store_locked_by_another_process_costs_no_request_and_loses_no_result(tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    short_rows(40).write_parquet(src)
    judge = ScriptedJudge()
    with FakeLLMServer(judge, latency=Latency(base_s=1.0)) as srv:

        def run(store: Path, *extra: str) -> subprocess.CompletedProcess[str]:
            cmd = cli_command(srv, src, tmp_path / f"{store.stem}.parquet", "--store", str(store),
                              "--timeout", TIMEOUT, "--max-concurrency", "4", *extra)  # fmt: skip
            return run_cli(cmd, KEY)

        free = run(tmp_path / "free.sqlite")
        assert free.returncode == 0, free.stderr
        needed = srv.stats().requests
        srv.reset_stats()

        # The same rows into a new store, while another process holds its write lock for HOLD_S seconds
        # from the moment the first request is out (the store file exists by then).
        store = tmp_path / "locked.sqlite"
        cmd = cli_command(srv, src, tmp_path / "locked.parquet", "--store", str(store), "--timeout", TIMEOUT,
                          "--max-concurrency", "4")  # fmt: skip
        proc = subprocess.Popen(cmd, env=child_env(**{KEY_ENV: KEY}), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)  # fmt: skip
        try:
            wait_for(lambda: srv.stats().requests > 0, None, "first request", limit=120)
            holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(store), str(HOLD_S)],
                                      stdout=subprocess.PIPE, text=True)  # fmt: skip
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "locked"
            out, err = proc.communicate(timeout=300)
            holder.wait(timeout=60)
        finally:
            proc.kill()
        assert proc.returncode == 0, err
        locked_requests = srv.stats().requests
        assert srv.stats().by_outcome.get("cancelled", 0) == 0, srv.stats().by_outcome
        assert locked_requests <= needed, (locked_requests, needed, err)
        # Every result reached the store once the lock was free, and the summary says the store was locked
        # (which also proves the lock was taken while replies were still coming).
        assert store_counts(store) == store_counts(tmp_path / "free.sqlite")
        assert "locked by another process" in out + err, out + err

        srv.reset_stats()
        again = run(store)
        assert again.returncode == 0, again.stderr
        assert srv.stats().requests == 0
