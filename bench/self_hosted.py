"""The judge against a real self-hosted server (issue 28): llama.cpp's server (xllamacpp) with Gemma 3 270M.

    uv run --frozen --group dev python bench/self_hosted.py [--rows 200]

Starts the server as the docs' recipe does (``-c 8192 -np 4``: 2,048 tokens a request), and scores through
the CLI, as a user would, with no schema or window flag: the sample data (``sample_data/flat``) and typical
RAG rows (``bench/rag_rows.py``), each with a fresh store. Every request crosses a recording proxy, so the
section gives requests (answered and refused), the prompt tokens the judge counted for them (tiktoken, as it
packs) against those the server reported (Gemma's own tokenizer), completion and cached tokens, what the
rows billed, the wall time and the error rows. The model is tiny: its error rows and claimless answers
measure it, not the plumbing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
from common import ROOT, machine
from rag_rows import make_rows

from faithfulness_pipeline.judging.llm.card import token_counter
from faithfulness_pipeline.testing.llama_cpp import MODEL_ALIAS, serve, server_version
from faithfulness_pipeline.testing.recording_proxy import Call, Recorder

MODEL = f"openai/{MODEL_ALIAS}"
SLOTS = 4


def _ours(calls: list[Call]) -> int:
    """The prompt tokens of the requests as the judge counts them when it packs: its tiktoken count of each
    message's text, plus the chat format's few tokens a message (prompts.MESSAGE_OVERHEAD_TOKENS)."""
    from faithfulness_pipeline.judging.llm.prompts import MESSAGE_OVERHEAD_TOKENS, REPLY_PRIMING_TOKENS

    count = token_counter(MODEL)
    total = 0
    for call in calls:
        total += REPLY_PRIMING_TOKENS
        for message in call.messages:
            total += MESSAGE_OVERHEAD_TOKENS + count(str(message.get("content") or ""))
    return total


def _score(proxy: Recorder, source: Path, work: Path, name: str) -> dict[str, object]:
    out = work / f"{name}-scored.parquet"
    env = {**os.environ, "FP_BENCH_LLAMA_KEY": "none", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(source), "-o", str(out), "--model",
               MODEL, "--api-base", proxy.base_url, "--api-key-env", "FP_BENCH_LLAMA_KEY", "--timeout", "600",
               "--max-concurrency", str(SLOTS), "--store", str(work / f"{name}.sqlite")]  # fmt: skip
    before = len(proxy.chat_calls())
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False, cwd=ROOT)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{name}: the CLI failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    calls = proxy.chat_calls()[before:]
    scored = pl.read_parquet(out)
    answered = [c for c in calls if c.status == 200]
    ok = scored.filter(pl.col("status") == "ok")
    return {
        "rows": scored.height,
        "requests": len(calls),
        "refused": len(calls) - len(answered),
        "cut": sum(c.finish_reason == "length" for c in answered),
        "ours": _ours(answered),
        "server_prompt": sum(c.prompt_tokens for c in calls),
        "server_completion": sum(c.completion_tokens for c in calls),
        "server_cached": sum(c.cached_tokens for c in calls),
        "billed_prompt": int(scored.get_column("billed_prompt_tokens").sum()),
        "billed_completion": int(scored.get_column("billed_completion_tokens").sum()),
        "wall": wall,
        "ok": ok.height,
        "errors": scored.height - ok.height,
        "claimless": int((ok.get_column("n_claims") == 0).sum()),
        "formats": sorted({c.response_format or "none" for c in calls}),
        "example_errors": scored.get_column("error").drop_nulls().unique().head(3).to_list(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200, help="typical RAG rows to score")
    args = parser.parse_args()
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="fp-bench-llama-") as folder:
        work = Path(folder)
        rag = work / "rag.parquet"
        make_rows(args.rows, seed=28).write_parquet(rag)
        with serve(context_size=8192, parallel=SLOTS, log_dir=work) as server, Recorder(server.root) as proxy:
            results["sample_data/flat"] = _score(proxy, ROOT / "sample_data" / "flat", work, "sample")
            results[f"{args.rows} typical RAG rows"] = _score(proxy, rag, work, "rag")
    lines = [
        "## Self-hosted judge: a real llama.cpp server",
        "",
        f"`python bench/self_hosted.py --rows {args.rows}` — llama.cpp's server (xllamacpp {server_version()}, "
        f"prebuilt from PyPI) serving Gemma 3 270M Q4_K_M with `-c 8192 -np {SLOTS}` (2,048 tokens a request), the CLI "
        f"with `--model {MODEL} --api-base ... --max-concurrency {SLOTS}` and no schema or window flag, a fresh "
        "store per input. *Ours* is the judge's own tiktoken count of the prompts it sent (what it packs by); "
        "*server* is what llama.cpp reported in `usage` (Gemma's tokenizer).",
        "",
        "| input | rows | requests (refused) | cut replies | prompt tokens: ours / server (ratio) | completion "
        "tokens | cached (server) | billed = server | wall s | ok / error rows | ok rows with no claim |",
        "|---|---:|---:|---:|---|---:|---:|---|---:|---|---:|",
    ]
    for name, r in results.items():
        ours, theirs = int(r["ours"]), int(r["server_prompt"])  # type: ignore[call-overload]
        billed = r["billed_prompt"] == r["server_prompt"] and r["billed_completion"] == r["server_completion"]
        lines.append(
            f"| {name} | {r['rows']} | {r['requests']} ({r['refused']}) | {r['cut']} | {ours:,} / {theirs:,} "
            f"({ours / max(theirs, 1):.2f}) | {r['server_completion']:,} | {r['server_cached']:,} | "
            f"{'yes' if billed else 'NO'} | {r['wall']:.0f} | {r['ok']} / {r['errors']} | {r['claimless']} |"
        )
    lines.append("")
    for name, r in results.items():
        lines.append(f"- {name}: response formats sent: {', '.join(r['formats'])}; "  # type: ignore[arg-type]
                     f"errors such as: {'; '.join(r['example_errors']) or 'none'}")  # type: ignore[arg-type]
    lines += ["", f"Machine: {machine()}; 1-minute load average at the end {os.getloadavg()[0]:.1f}."]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
