"""Cached prompt tokens: billed USD per 1,000 typical answers with and without a provider's prompt cache.

    .venv/bin/python bench/cached_tokens.py [--rows 1000]

The same typical RAG rows (`bench/rag_rows.py`) are scored by the litellm judge against the fake server
(scripted replies, cl100k token counts), no result store, at explicit gpt-4o-mini list prices (input
1.5e-7, cached input 7.5e-8, output 6e-7 USD a token):

1. the server reports no cached tokens (a provider without a prompt cache: every prompt token at full price);
2. the server reports them by OpenAI's rule (a prefix of 1,024 tokens or more shared with an earlier prompt,
   in steps of 128), cold: what a day's first scoring costs;
3. the same, the very same requests sent again right after (a re-run without the store, or ``--refresh``,
   within the provider's cache lifetime): the most prompt caching can take off.

The instruction blocks (each step's system message, identical in every request of the step) are counted
and shown beside the 1,024-token minimum: they are what distinct packs of a run can share.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import polars as pl
from common import machine, machine_line, score
from rag_rows import make_rows

from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.judging.llm.prompts import extract_messages, verdict_messages
from faithfulness_pipeline.testing.fakellm import FakeLLMServer, count_prompt_tokens
from faithfulness_pipeline.testing.fakellm.tokens import PROMPT_CACHE_MIN_TOKENS
from faithfulness_pipeline.testing.scripted import ScriptedJudge

#: gpt-4o-mini's list prices, set by hand so that the figures do not move with litellm's map.
PRICES = {"input_cost_per_token": 1.5e-7, "cached_input_cost_per_token": 7.5e-8, "output_cost_per_token": 6e-7}


def _run(df: pl.DataFrame, server: FakeLLMServer, label: str) -> dict[str, Any]:
    from common import litellm_judge

    server.reset_stats()
    scored = score(df, litellm_judge(server.base_url, **PRICES), ScoringConfig())
    st = server.stats()
    billed = scored.select(pl.col("billed_prompt_tokens", "billed_cached_prompt_tokens", "billed_completion_tokens",
                                  "billed_cost_usd").sum()).row(0, named=True)
    assert billed["billed_prompt_tokens"] == st.billed_prompt_tokens, "billed prompt tokens != server count"
    assert billed["billed_cached_prompt_tokens"] == st.billed_cached_prompt_tokens, "cached != server count"
    return {"label": label, "rows": scored.height, "ok": int((scored.get_column("status") == "ok").sum()),
            "requests": st.requests, **billed}


def _instruction_tokens() -> dict[str, int]:
    """Tokens of each step's instruction message alone (the chat format's 3 a message included)."""
    return {step: count_prompt_tokens(messages[:1]) - 3
            for step, messages in (("extract", extract_messages([], [])), ("verdict", verdict_messages([], {})))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1000)
    args = parser.parse_args()
    df = make_rows(args.rows, seed=11)
    with FakeLLMServer(ScriptedJudge(grounded=True)) as server:
        runs = [_run(df, server, "no prompt cache")]
        server.set_prompt_cache(True)
        runs.append(_run(df, server, "prompt cache, cold run"))
        runs.append(_run(df, server, "prompt cache, the same requests again"))
    instructions = _instruction_tokens()
    print("# Cached prompt tokens: billed USD per 1,000 answers\n")
    print(f"{args.rows} typical RAG rows (`bench/rag_rows.py`, seed 11: en / zh / ko, 3-6 sentence answers, 3-8 "
          "passages), the litellm judge against the fake server, no result store, gpt-4o-mini list prices set by "
          "hand (input $0.15, cached input $0.075, output $0.60 per million tokens).\n")
    print("| run | rows ok | requests | billed prompt tokens | of them cached | cached share | "
          "USD per 1,000 answers | vs no cache |")
    print("|---|---|---|---|---|---|---|---|")
    base = 1000 * runs[0]["billed_cost_usd"] / runs[0]["rows"]
    for r in runs:
        per_k = 1000 * r["billed_cost_usd"] / r["rows"]
        share = r["billed_cached_prompt_tokens"] / r["billed_prompt_tokens"] if r["billed_prompt_tokens"] else 0.0
        print(f"| {r['label']} | {r['ok']}/{r['rows']} | {r['requests']} | {r['billed_prompt_tokens']:,} | "
              f"{r['billed_cached_prompt_tokens']:,} | {share:.3f} | ${per_k:.4f} | {per_k / base:.3f} |")
    mean_prompt = runs[0]["billed_prompt_tokens"] / max(1, runs[0]["requests"])
    longest = max(instructions.values())
    # What padding the instruction block up to the minimum would change per request, were it always cached.
    padded = PROMPT_CACHE_MIN_TOKENS * PRICES["cached_input_cost_per_token"]
    unpadded = longest * PRICES["input_cost_per_token"]
    request = mean_prompt * PRICES["input_cost_per_token"]
    print(f"\nThe instruction message of every request is the same within a step (extraction "
          f"{instructions['extract']} tokens, verdicts {instructions['verdict']} tokens), but shorter than the "
          f"{PROMPT_CACHE_MIN_TOKENS:,} tokens a provider's automatic prefix cache needs (OpenAI's rule, which "
          "the fake server follows): distinct packs share nothing a cache serves, so a cold run gets no cached "
          f"tokens (a request's prompt is {mean_prompt:,.0f} tokens on average, almost all of it its own data). "
          "Only requests that repeat an earlier prompt's first 1,024 tokens or more (a re-run without the store, "
          "a refresh, a re-ask that quotes a bad reply after the same prompt) are served from the cache, and "
          "their cached tokens are billed at the cached price.")
    print(f"\nThe prompts are not padded to reach the minimum: even if a padded block were always served "
          f"from the cache, {PROMPT_CACHE_MIN_TOKENS:,} cached tokens (${padded * 1e6:.1f} per million requests) "
          f"against {longest} uncached ones (${unpadded * 1e6:.1f}) would save "
          f"{(unpadded - padded) / request:.1%} of a typical request's prompt cost.")
    print()
    print(machine_line({"machine": machine(), "load_average": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
