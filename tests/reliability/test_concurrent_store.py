"""Two CLI processes scoring the same table against one result store at the same time.

No corruption: both finish, both tables equal a single run's, SQLite finds the store intact and it
holds exactly the results of a single run. No row scored twice beyond the requests in flight: a process that
was paused while another one stored results does not pay for those results again.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import polars as pl

from faithfulness_pipeline.testing.fakellm import FakeLLMServer, Latency
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.reliability.support import (
    KEY_ENV,
    Reference,
    child_env,
    cli_command,
    comparable,
    kill_group,
    run_cli,
    step_items,
    store_counts,
    wait_for,
)

KEY = "sk-shared-store-8c2e4a6f1b3d5709"
CONCURRENCY = 2
MAX_ITEMS_PER_REQUEST = 32


def _items(judge: ScriptedJudge) -> int:
    return step_items(judge, "extract") + step_items(judge, "verdict")


def test_two_processes_at_once_share_one_store_without_corruption(reference: Reference, tmp_path: Path) -> None:
    judge = ScriptedJudge()
    single_items = sum(reference.items.values())
    store = tmp_path / "shared.sqlite"
    # A slow server while both processes start on the same rows (leases keep the second from asking what the
    # first is asking: it waits for those results in the store), then a fast one for the rest of both runs.
    with FakeLLMServer(judge, latency=Latency(base_s=1.0)) as srv:
        # Chunks of 50 rows: the two processes look up, send and commit many times while the other does too.
        cmds = [cli_command(srv, reference.src, tmp_path / f"{name}.parquet", "--store", str(store),
                            "--chunk-rows", "50", "--max-concurrency", str(CONCURRENCY)) for name in ("a", "b")]  # fmt: skip
        procs = [subprocess.Popen(c, env=child_env(**{KEY_ENV: KEY}), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for c in cmds]  # fmt: skip
        # Both have started (each process's first request opens within seconds of the other's; the second
        # may instead wait for contents the first has leased), then a fast server for the rest of both runs.
        wait_for(lambda: srv.stats().requests >= 2 * CONCURRENCY, None, "the first requests")
        time.sleep(2.0)
        srv.set_latency(Latency(base_s=0.01))
        results = [p.communicate(timeout=300) for p in procs]
        for proc, (_, err) in zip(procs, results, strict=True):
            assert proc.returncode == 0, err
            # neither process ever failed to read or write the store (locked, corrupt, ...)
            assert "result store" not in err, err
        both_items = _items(judge)
    # Each process read some results the other one wrote (they interleave chunk by chunk): both tables
    # equal to an uninterrupted run's show that every value in the shared store is whole and right.
    expected = comparable(reference.scored)
    for name in ("a", "b"):
        assert comparable(pl.read_parquet(tmp_path / f"{name}.parquet")).equals(expected), name
    # as many results per step as one run stores (keys differ: they include the server's address)
    assert store_counts(store) == store_counts(reference.store)  # after SQLite's integrity check
    # Started together on the same chunks, the two runs still ask each content about once (leases).
    assert single_items <= both_items <= 1.05 * single_items
    print(f"one run asked {single_items} items; two runs at once asked {both_items}")


def test_a_paused_process_does_not_pay_again_for_what_another_one_stored(reference: Reference, tmp_path: Path) -> None:
    src = reference.src
    store = tmp_path / "shared.sqlite"
    judge = ScriptedJudge()
    with FakeLLMServer(judge, latency=Latency(base_s=0.1)) as srv:
        first = subprocess.Popen(
            cli_command(srv, src, tmp_path / "a.parquet", "--store", str(store), "--max-concurrency", str(CONCURRENCY),
                        "--quiet"),
            env=child_env(**{KEY_ENV: KEY}), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        try:
            wait_for(lambda: step_items(judge, "extract") >= 3 * MAX_ITEMS_PER_REQUEST, first, "extraction requests")
            first.send_signal(signal.SIGSTOP)
            # its requests in flight are answered (the replies wait in its sockets) before the other one starts
            wait_for(lambda: srv.stats().open_requests == 0, None, "the paused run's requests to be answered")
            before_pause = _items(judge)
            srv.set_latency(Latency())
            second = run_cli(cli_command(srv, src, tmp_path / "b.parquet", "--store", str(store), "--quiet"), KEY)
            assert second.returncode == 0, second.stderr
            after_second = _items(judge)
            first.send_signal(signal.SIGCONT)
            _, err = first.communicate(timeout=300)
            assert first.returncode == 0, err
        finally:
            if first.poll() is None:
                first.send_signal(signal.SIGCONT)
                time.sleep(0.1)
                kill_group(first)
    paid_again = _items(judge) - after_second
    print(f"first run asked {before_pause} items, paused; the second asked {after_second - before_pause}; "
          f"the first, resumed, asked {paid_again} more")  # fmt: skip
    assert comparable(pl.read_parquet(tmp_path / "a.parquet")).equals(comparable(pl.read_parquet(tmp_path / "b.parquet")))
    # everything was in the store when the first run resumed: at most its requests in flight may repeat
    assert paid_again <= CONCURRENCY * MAX_ITEMS_PER_REQUEST
