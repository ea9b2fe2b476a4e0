"""What a sample costs and what it tells (issue 29 items 1-2): requests and billed tokens at a range of
``sample_rate`` values, and how close each rate's 95 % interval is to the census mean.

Typical RAG rows (two models) are scored by the litellm judge over real HTTP against the fake server,
each rate into a fresh run (no store), so every request is paid. The census (rate 1) gives the population's
mean hallucination score per model; each sample's interval is compared with it. Also timed: drawing the
sample for a million row keys (the only work a sample adds; CPU of this process).

    uv run --frozen --group dev python bench/sampling.py [--rows 2000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import time

import polars as pl
from common import litellm_judge, machine, score
from rag_rows import make_rows

from faithfulness_pipeline.core.aggregates import daily_aggregates
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.sampling import in_sample
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge

RATES = (1.0, 0.5, 0.2, 0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    args = parser.parse_args()
    rows = make_rows(args.rows, seed=11).with_columns(
        pl.when(pl.int_range(pl.len()) % 2 == 0).then(pl.lit("model-a")).otherwise(pl.lit("model-b")).alias("model"),
        pl.lit(dt.date(2026, 12, 1)).alias("day"),
    )
    results = []
    with FakeLLMServer(ScriptedJudge(grounded=True)) as server:  # verdicts from the passages: real variance
        for rate in RATES:
            server.reset_stats()
            scored = score(rows, litellm_judge(server.base_url), ScoringConfig(sample_rate=rate))
            stats = server.stats()
            daily = daily_aggregates(scored.with_columns(rows.get_column("day")))
            results.append((rate, stats.requests, stats.prompt_tokens + stats.completion_tokens, daily))
    census = {r["model"]: r["hallucination_mean"] for r in results[0][3].iter_rows(named=True)}
    keys = pl.Series([f"conversation-{i:07d}" for i in range(1_000_000)])
    started = time.process_time()
    drawn = int(in_sample(keys, 0.1).sum())
    draw_s = time.process_time() - started

    full_requests, full_tokens = results[0][1], results[0][2]
    print("## Sampling: what a sample costs and what it tells\n")
    print(f"`uv run --frozen --group dev python bench/sampling.py --rows {args.rows}` — {machine()}\n")
    print(f"{args.rows} typical RAG rows of two models, the litellm judge against the fake server, a fresh run "
          "per rate (no store). Interval: the 95 % interval of each model's mean hallucination score; the "
          "census mean is the rate-1 run's.\n")
    print("| sample_rate | judged rows | requests | tokens | requests vs census | model | mean | 95 % interval | "
          "census mean inside |")
    print("|---:|---:|---:|---:|---:|---|---:|---|---|")
    for rate, requests, tokens, daily in results:
        for k, r in enumerate(daily.iter_rows(named=True)):
            lead = (f"| {rate:g} | {int(daily.get_column('sampled_answers').sum())} | {requests} | {tokens} | "
                    f"{requests / full_requests:.2f} ") if k == 0 else "| | | | | "
            inside = r["hallucination_mean_low"] <= census[r["model"]] <= r["hallucination_mean_high"]
            print(f"{lead}| {r['model']} | {r['hallucination_mean']:.3f} | "
                  f"{r['hallucination_mean_low']:.3f} – {r['hallucination_mean_high']:.3f} | {'yes' if inside else 'no'} |")
    print(f"\nTokens at rate 0.1: {results[-1][2] / full_tokens:.2f} of the census's. Drawing the sample of 1,000,000 "
          f"row keys (rate 0.1, {drawn} drawn) took {draw_s:.2f} s of CPU: the only work a sample adds, and none at "
          "rate 1.")


if __name__ == "__main__":
    main()
