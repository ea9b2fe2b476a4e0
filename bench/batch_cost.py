"""Nightly scoring at the batch price: cost per 1,000 typical RAG answers, interactive vs batch mode.

    .venv/bin/python bench/batch_cost.py [--rows 2000]

The same typical RAG rows (`bench/rag_rows.py`) are scored twice, cold, by the judge the CLI builds
(``judging.factory.make_judge``) for ``openai/gpt-4o-mini`` pointed at the fake server (scripted replies,
cl100k token counts): once interactively, once with ``mode = "batch"`` (Files and Batches endpoints).
Costs come from each run's own billed columns at litellm's list prices for the model (interactive and
batch); the server's counts of requests, batch lines, uploaded files and batches are shown beside them.
Client CPU per answer is the process CPU time of each run (waiting for the batches costs none). A third run
keeps the batch records in a PostgreSQL store (a throwaway cluster) where PostgreSQL is installed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl
from common import FAKE_KEY_ENV, machine, machine_line, score
from rag_rows import make_rows

from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.fakellm.faults import BatchTiming
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.postgres_cluster import missing_reason, postgres_cluster

MODEL = "openai/gpt-4o-mini"


def _run(df: pl.DataFrame, server: FakeLLMServer, mode: str, store: str, label: str | None = None) -> dict[str, Any]:
    server.reset_stats()
    judge = make_judge(JudgeSettings(model=MODEL, api_base=server.base_url, api_key_env=FAKE_KEY_ENV, mode=mode,
                                     store=store, batch_poll_s=0.05))
    cpu, wall = time.process_time(), time.perf_counter()
    scored = score(df, judge)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    st = server.stats()
    return {
        "mode": mode, "label": label or mode, "rows": scored.height,  # every typical RAG row has an answer
        "ok": int((scored.get_column("status") == "ok").sum()),
        "billed_usd": float(scored.get_column("billed_cost_usd").sum()),
        "billed_prompt": int(scored.get_column("billed_prompt_tokens").sum()),
        "billed_completion": int(scored.get_column("billed_completion_tokens").sum()),
        "chat_requests": st.requests, "batch_lines": st.batch_lines, "files": st.files_uploaded,
        "batches": st.batches_created, "cpu_s": cpu, "wall_s": wall,
        "server_tokens": (st.billed_prompt_tokens + st.batch_billed_prompt_tokens,
                          st.billed_completion_tokens + st.batch_billed_completion_tokens),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=2000)
    args = parser.parse_args()
    df = make_rows(args.rows, seed=11)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(
        ScriptedJudge(grounded=True), batch_timing=BatchTiming(validating_s=0.05, per_line_s=0.0, finalizing_s=0.05)
    ) as server:
        runs.append(_run(df, server, "interactive", str(Path(tmp) / "i.sqlite")))
        runs.append(_run(df, server, "batch", str(Path(tmp) / "b.sqlite")))
        # The batch records in a PostgreSQL store (a throwaway cluster on a Unix socket) instead of the file.
        no_postgres = missing_reason()
        if no_postgres is None:
            with postgres_cluster() as cluster:
                runs.append(_run(df, server, "batch", cluster.url(), label="batch, PostgreSQL store"))
    batch = runs[1]
    per_k = {r["label"]: 1000 * r["billed_usd"] / r["rows"] for r in runs}
    ratio = per_k["batch"] / per_k["interactive"]
    print("# Batch mode: cost per 1,000 answers, interactive vs batch\n")
    print(f"{args.rows} typical RAG rows (`bench/rag_rows.py`, seed 11: en / zh / ko, 3-6 sentence answers, 3-8 "
          f"passages), `{MODEL}` list prices from litellm's bundled map, scripted replies of the fake server.\n")
    print("| mode | rows ok | USD per 1,000 answers | billed prompt / completion tokens | chat requests | "
          "batch lines | files | batches | client CPU ms per answer |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        assert (r["billed_prompt"], r["billed_completion"]) == r["server_tokens"], "billed columns != server count"
        print(f"| {r['label']} | {r['ok']}/{r['rows']} | ${per_k[r['label']]:.4f} | {r['billed_prompt']:,} / "
              f"{r['billed_completion']:,} | {r['chat_requests']} | {r['batch_lines']} | {r['files']} | "
              f"{r['batches']} | {1000 * r['cpu_s'] / r['rows']:.2f} |")
    verdict = "met" if abs(ratio - 0.5) <= 0.02 else "NOT met"
    print(f"\nBatch / interactive cost per answer: **{ratio:.3f}** (target: half; {verdict}). Every run's billed "
          "columns equal the server's own token counts. The token counts differ a little because the batch "
          "run packs the whole run at once (the interactive one packs per call of 512 answers).")
    if len(runs) == 3:
        same = all(runs[2][k] == batch[k] for k in ("ok", "billed_prompt", "billed_completion", "batch_lines",
                                                     "files", "batches"))
        print(f"With the batch records in PostgreSQL: {'the same' if same else 'NOT the same'} rows, tokens, lines, "
              "files and batches as with the SQLite file.")
    else:
        print(f"The PostgreSQL-store run was skipped: {no_postgres}.")
    print()
    print(machine_line({"machine": machine(), "load_average": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
