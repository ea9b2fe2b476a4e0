"""The result store on PostgreSQL vs SQLite: warm re-run speed and per-reply write latency, same run.

    .venv/bin/python bench/store_backends.py [--rows 5000]

A throwaway PostgreSQL cluster is started on a Unix socket (``tests/postgres_cluster.py``; the Debian
package must be installed). For each backend, typical RAG rows (`bench/rag_rows.py`) are scored once cold
by the judge the CLI builds, against the fake server, to fill the store; then the same rows are scored
again (a warm re-run: every row is served whole from the store) and timed. Write latency is one reply's
worth of results (8 verdict values) committed as one transaction, repeated.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl
from common import FAKE_KEY_ENV, machine, machine_line, score
from rag_rows import make_rows

from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.judging.store.open import open_store
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.postgres_cluster import missing_reason, postgres_cluster

WRITES = 400


def _score(df: pl.DataFrame, base_url: str, store: str) -> tuple[float, pl.DataFrame]:
    judge = make_judge(JudgeSettings(model="openai/bench-judge", api_base=base_url, api_key_env=FAKE_KEY_ENV,
                                     store=store))
    start = time.perf_counter()
    scored = score(df, judge)
    return time.perf_counter() - start, scored


def _write_latency_ms(store_spec: str) -> list[float]:
    store = open_store(store_spec)
    value = '[0.125,812,40,null,0,"S",0,0,null,"C",0,1,"The passage says 1998."]'
    times: list[float] = []
    for n in range(WRITES):
        rows = [((n * 8 + i).to_bytes(16, "big"), "verdict", value) for i in range(8)]
        start = time.perf_counter()
        store.put_many(rows)
        times.append(1000 * (time.perf_counter() - start))
    store.close()
    return times


def _measure(df: pl.DataFrame, server: FakeLLMServer, spec: str, label: str) -> dict[str, Any]:
    cold_s, cold = _score(df, server.base_url, spec)
    server.reset_stats()
    warm_s, warm = _score(df, server.base_url, spec)
    assert server.stats().requests == 0, "the warm re-run sent requests"
    assert warm.get_column("result_source").unique().to_list() == ["store"]
    writes = _write_latency_ms(spec)
    writes.sort()
    return {"label": label, "rows": df.height, "cold_s": cold_s, "warm_s": warm_s,
            "write_median": statistics.median(writes), "write_p95": writes[int(0.95 * len(writes))],
            "ok": int((cold.get_column("status") == "ok").sum())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=5000)
    args = parser.parse_args()
    reason = missing_reason()
    if reason is not None:
        raise SystemExit(f"cannot start PostgreSQL: {reason}")
    df = make_rows(args.rows, seed=5)
    results = []
    with tempfile.TemporaryDirectory() as tmp, postgres_cluster() as cluster, \
            FakeLLMServer(ScriptedJudge(grounded=True)) as server:
        results.append(_measure(df, server, str(Path(tmp) / "store.sqlite"), "SQLite file"))
        results.append(_measure(df, server, cluster.url(), "PostgreSQL 15 (Unix socket, fsync off)"))
    print("# Result store: PostgreSQL vs SQLite\n")
    print(f"{args.rows} typical RAG rows (`bench/rag_rows.py`, seed 5), the judge the CLI builds against the fake "
          f"server; write latency over {WRITES} commits of one reply's 8 verdict values.\n")
    print("| store | warm re-run answers/s | cold run s (fills the store) | write per reply, median ms | p95 ms |")
    print("|---|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['label']} | {r['rows'] / r['warm_s']:,.0f} | {r['cold_s']:.1f} | {r['write_median']:.2f} | "
              f"{r['write_p95']:.2f} |")
    sqlite, pg = results
    print(f"\nPostgreSQL / SQLite: warm re-run speed {sqlite['warm_s'] / pg['warm_s']:.2f}x, write latency "
          f"{pg['write_median'] / sqlite['write_median']:.1f}x (median). The test cluster runs with fsync off; a "
          "server on another machine adds a network round trip to every lookup batch and commit.\n")
    print(machine_line({"machine": machine(), "load_average": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
