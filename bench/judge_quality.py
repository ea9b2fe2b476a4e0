"""Does packing cost agreement with people on a real model? (issue 38 item 2)

    uv run --frozen --group dev python bench/judge_quality.py [--rows 36] [--api-base URL --model M]

Human-labelled rows from ``../shared/datasets/dev`` (a subset stratified by language, then source and label)
judged by a real model in every request shape of ``faithfulness_pipeline.api.packing_study``: one answer per
request (Mastra's shape), the default packing, the default packing over shuffled rows, and the default packing
again (the model's own run-to-run noise), verdicts on the *same* claims in every shape; extraction in two
shapes separately. With no ``--api-base`` it serves the real-model tier itself: Qwen2.5-Coder-1.5B-Instruct
(Q4_K_M) on llama.cpp's prebuilt server (xllamacpp), ``-c 16384 -np 4``, on this machine's cores. Any other
OpenAI-compatible endpoint: ``--api-base`` and ``--model`` (a faster one can take the whole set: ``--rows 300``).

Prints a markdown section for BENCHMARKS.md; ``--out`` keeps every shape's per-row verdicts (Parquet).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
from common import ROOT, machine

from faithfulness_pipeline.api.packing_study import (
    SHAPES,
    extraction_by_pack_size,
    extraction_markdown,
    markdown,
    run_study,
    stratified,
)
from faithfulness_pipeline.core.calibration import CalibrationConfig
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.llama_cpp import serve, server_version

DEV = ROOT.parent / "shared" / "datasets" / "dev" / "conversations_labeled.parquet"
KEY_ENV = "FP_BENCH_LLAMA_KEY"
SLOTS = 4
CONTEXT = 16384


@contextlib.contextmanager
def _endpoint(args: argparse.Namespace) -> Iterator[tuple[str, str, str]]:
    """(api_base, model, what serves it)."""
    if args.api_base:
        yield args.api_base, args.model, f"`{args.model}` at the given endpoint"
        return
    with serve(model="qwen", context_size=CONTEXT, parallel=SLOTS) as server:
        yield (server.base_url, "openai/qwen", f"Qwen2.5-Coder-1.5B-Instruct Q4_K_M on llama.cpp's server (xllamacpp "
               f"{server_version()}), `-c {CONTEXT} -np {SLOTS}`, {os.cpu_count()} threads")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=36)
    parser.add_argument("--labelled", type=Path, default=DEV)
    parser.add_argument("--api-base", default=None)
    parser.add_argument("--model", default=None)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--bootstrap", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--extraction-sizes", default=None,
                        help="only extraction, at these answers per request (e.g. 1,4,8,32): claims per answer")
    args = parser.parse_args()
    if args.api_base and not args.model:
        parser.error("--api-base needs --model")
    if not args.labelled.is_file():
        print(f"skipped: no labelled rows at {args.labelled} (the shared dev set lives in ../shared/datasets/dev)",
              file=sys.stderr)
        return 0
    os.environ.setdefault(KEY_ENV, "none")
    labelled = stratified(pl.read_parquet(args.labelled), args.rows)
    calibration = CalibrationConfig(group_columns=("language",), bootstrap=args.bootstrap)
    started = time.monotonic()
    with _endpoint(args) as (api_base, model, served):
        settings = JudgeSettings(model=model, api_base=api_base, api_key_env=KEY_ENV, timeout_s=args.timeout,
                                 max_concurrency=SLOTS)
        if args.extraction_sizes:
            sizes = [int(s) for s in args.extraction_sizes.split(",")]
            frame, costs = asyncio.run(extraction_by_pack_size(labelled, settings, make_judge, sizes))
            print("## Claim extraction by pack size on a real model (issue 38)\n")
            print(f"`python bench/judge_quality.py --labelled {args.labelled.name} --rows {args.rows} --extraction-sizes "
                  f"{args.extraction_sizes}` — {served}; the answers of {labelled.height} rows of {args.labelled} "
                  "(stratified by language, source and label where it has them).\n")
            print(extraction_markdown(frame, costs))
            print(f"\nWhole run {time.monotonic() - started:.0f} s. Machine: {machine()}; 1-minute load average at "
                  f"the end {os.getloadavg()[0]:.1f}.")
            return 0
        result = asyncio.run(run_study(
            labelled, settings, make_judge, calibration=calibration, shapes=tuple(args.shapes.split(",")),
            progress=lambda step: print(f"[{time.monotonic() - started:6.0f} s] {step}", file=sys.stderr, flush=True),
        ))
    if args.out:
        result.rows.write_parquet(args.out)
    languages = labelled.group_by("language").len().sort("language").rows()
    hallucinated = int(labelled.get_column("label_hallucinated").sum())
    print("## Judge quality on a real model: does packing cost agreement? (issue 38)\n")
    print(f"`python bench/judge_quality.py --rows {args.rows}` — {served}; {labelled.height} human-labelled dev rows "
          f"({', '.join(f'{n} {lang}' for lang, n in languages)}; {hallucinated} hallucinated), stratified by "
          f"language, source and label; the judge's default settings but `--max-concurrency {SLOTS}` and "
          f"`--timeout {args.timeout:g}`, no store. BA = balanced accuracy of `hallucination_score > "
          f"{calibration.threshold}` against the labels, with a 95 % bootstrap interval ({args.bootstrap} "
          "resamples); verdict shapes all judge the claims of the one-answer-per-request extraction.\n")
    print(markdown(result))
    print(f"\nWhole run {time.monotonic() - started:.0f} s. Machine: {machine()}; 1-minute load average at the end "
          f"{os.getloadavg()[0]:.1f}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
