"""Pay once per distinct content: a run whose rows repeat costs what its distinct rows cost alone.

    .venv/bin/python bench/dedup.py

For each case, typical RAG rows (`bench/rag_rows.py`) are scored twice, cold and without a store, by the
judge the CLI builds (``judging.factory.make_judge``: the litellm judge in the judge stack)
against the fake server: once the distinct rows alone, once ``rows`` rows repeating them in turn under
their own conversation ids. Requests and billed tokens are the server's own counts; the table's
``billed_*`` columns must add up to them, and the dry run (``estimate``) counts each content once.
"""

from __future__ import annotations

import os
import time
from typing import Any

import polars as pl
from common import FAKE_KEY_ENV, machine, machine_line, score
from overhead import BENCH_MODEL
from rag_rows import make_rows

from faithfulness_pipeline.cli.process import freeze_loaded_objects
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.port import ExtractItem, VerdictItem
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.judging.llm.packing import rough_sentences
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge

CASES = ((50_000, 17), (100_000, 10_000))


def _judge(base_url: str) -> Any:
    judge = make_judge(JudgeSettings(model=BENCH_MODEL, api_base=base_url, api_key_env=FAKE_KEY_ENV))
    freeze_loaded_objects()  # as the CLI does for its own process
    return judge


def _score(df: pl.DataFrame, server: FakeLLMServer) -> dict[str, Any]:
    server.reset_stats()
    judge = _judge(server.base_url)
    start = time.perf_counter()
    scored = score(df, judge)
    wall = time.perf_counter() - start
    sent = server.stats()
    billed = scored.select(pl.col(S.BILLED_COLUMNS).sum()).row(0, named=True)
    return {
        "rows": df.height, "wall_s": wall, "requests": sent.requests,
        "prompt_tokens": sent.billed_prompt_tokens, "completion_tokens": sent.billed_completion_tokens,
        "billed_adds_up": billed["billed_prompt_tokens"] == sent.billed_prompt_tokens
        and billed["billed_completion_tokens"] == sent.billed_completion_tokens,
        "billed_cost_usd": billed["billed_cost_usd"],
        "sources": dict(scored.get_column(S.RESULT_SOURCE).value_counts().iter_rows()),
    }


def _dry_run(df: pl.DataFrame, server: FakeLLMServer) -> int:
    rows = df.select("conversation_id", "input", "output", "context").rows()
    extract = [ExtractItem(k, a, q) for k, q, a, _ in rows]
    verdict = [VerdictItem(k, tuple(rough_sentences(a)), tuple(c)) for k, _, a, c in rows]
    return int(_judge(server.base_url).estimate(extract, verdict).requests)


def run() -> dict[str, Any]:
    results = []
    with FakeLLMServer(ScriptedJudge(grounded=True)) as server:
        for rows, distinct in CASES:
            base = make_rows(distinct, seed=17)
            big = pl.concat([base] * -(-rows // distinct)).head(rows).with_columns(
                pl.format("rep-{}", pl.int_range(pl.len(), dtype=pl.Int64)).alias("conversation_id")
            )
            results.append({
                "distinct": distinct, "alone": _score(base, server), "repeated": _score(big, server),
                "dry_alone": _dry_run(base, server), "dry_repeated": _dry_run(big, server),
            })
    return {"results": results, "machine": machine(), "load_average": os.getloadavg()[0]}


def report(result: dict[str, Any]) -> str:
    lines = [
        "## Pay once per distinct content",
        "",
        "`.venv/bin/python bench/dedup.py` — typical RAG rows, cold, no store, the judge the CLI builds "
        f"(`{BENCH_MODEL}` against the fake server): the distinct rows alone, then many rows repeating them. "
        "Requests and tokens are the server's own counts; the table's billed columns add up to them.",
        "",
        "| run | rows | requests | billed prompt tokens | billed completion tokens | billed cost $ | dry-run "
        "requests | result_source | billed columns = server | wall s |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    verdicts = []
    for case in result["results"]:
        for label, run_, dry in (("distinct rows alone", case["alone"], case["dry_alone"]),
                                 (f"repeating {case['distinct']:,} contents", case["repeated"], case["dry_repeated"])):
            sources = ", ".join(f"{k} {v:,}" for k, v in sorted(run_["sources"].items()))
            lines.append(
                f"| {label} | {run_['rows']:,} | {run_['requests']:,} | {run_['prompt_tokens']:,} | "
                f"{run_['completion_tokens']:,} | {run_['billed_cost_usd']:.4f} | {dry:,} | {sources} | "
                f"{'yes' if run_['billed_adds_up'] else 'NO'} | {run_['wall_s']:.1f} |"
            )
        a, r = case["alone"], case["repeated"]
        same = (a["requests"], a["prompt_tokens"], a["completion_tokens"]) == (
            r["requests"], r["prompt_tokens"], r["completion_tokens"])
        dry_same = case["dry_alone"] == case["dry_repeated"]
        verdicts.append(f"{r['rows']:,} rows of {case['distinct']:,} contents: requests and billed tokens "
                        f"{'equal to' if same else 'NOT equal to'} the distinct rows' own run; dry run "
                        f"{'counts each content once' if dry_same else 'does NOT count each content once'}"
                        f"{'' if r['billed_adds_up'] else '; billed columns do NOT add up'}")
    lines += ["", "Targets: " + "; ".join(verdicts) + ".", "", machine_line(result)]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run()))
