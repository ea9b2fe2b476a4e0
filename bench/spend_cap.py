"""What a spend cap (``max_cost_usd``, issue 29 item 3) leaves judged, and how close to the cap a run spends.

Typical RAG rows are scored by the litellm judge over real HTTP against the fake server, interactively and
in batch mode, first without a cap (the full bill), then with caps at a share of that bill, each into a
fresh store; then every capped run is resumed without a cap on its store, which pays for the rest. Every
figure is a count or a ratio of money, not a time.

    uv run --frozen --group dev python bench/spend_cap.py [--rows 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
from common import FAKE_KEY_ENV, machine
from rag_rows import make_rows

from faithfulness_pipeline.api import score_frame_async
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.fakellm.faults import BatchTiming
from faithfulness_pipeline.testing.scripted import ScriptedJudge

SHARES = (0.25, 0.5, 0.9)
PRICES = {"input_cost_per_token": 1.5e-7, "output_cost_per_token": 6e-7}
FAST = BatchTiming(validating_s=0.01, per_line_s=0.0005, finalizing_s=0.01, cancelling_s=0.01)


def _run(rows: pl.DataFrame, server: FakeLLMServer, store: Path, mode: str, cap: float | None) -> pl.DataFrame:
    settings: dict[str, Any] = {"model": "openai/bench-judge", "api_base": server.base_url,
                                "api_key_env": FAKE_KEY_ENV, "store": str(store), "mode": mode,
                                "batch_poll_s": 0.05, "max_cost_usd": cap, **PRICES}
    return asyncio.run(score_frame_async(rows, make_judge(JudgeSettings(**settings))))


def _billed(df: pl.DataFrame) -> float:
    return float(df.get_column("billed_cost_usd").sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    args = parser.parse_args()
    rows = make_rows(args.rows, seed=21)
    lines = []
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(ScriptedJudge(), batch_timing=FAST) as server:
        for mode in ("interactive", "batch"):
            full = _billed(_run(rows, server, Path(tmp) / f"{mode}-full.sqlite", mode, None))
            for share in SHARES:
                store = Path(tmp) / f"{mode}-{share}.sqlite"
                cap = full * share
                capped = _run(rows, server, store, mode, cap)
                spent = _billed(capped)
                judged = capped.filter(pl.col("status") == S.STATUS_OK).height
                skipped = capped.filter(pl.col("status") == S.STATUS_SKIPPED)
                paid_for_skipped = float(skipped.get_column("billed_cost_usd").sum())
                errors = capped.filter(pl.col("status") == S.STATUS_ERROR).height
                rest = _billed(_run(rows, server, store, mode, None))
                lines.append(
                    f"| {mode} | {share:.0%} | {judged} ({judged / args.rows:.0%}) | {skipped.height} | {errors} "
                    f"| {spent / cap:.3f} | {paid_for_skipped / spent:.1%} | {(spent + rest) / full:.3f} |"
                )
    print("## Spend caps: what a capped run judges and spends\n")
    print(f"`uv run --frozen --group dev python bench/spend_cap.py --rows {args.rows}` — {machine()}\n")
    print(f"{args.rows} typical RAG rows, the litellm judge against the fake server at default settings (16 "
          "requests in flight, 16,000-token packs), prices set by hand. The cap is a share of the same rows' "
          "uncapped bill in the same mode; each capped run starts from an empty store and is then resumed "
          "without a cap on it.\n")
    print("| mode | cap (share of the full bill) | rows judged | rows skipped | error rows | spent / cap "
          "| of it paid for rows then skipped | capped + resumed bill / full bill |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(lines))
    print("\nRows then skipped were paid for when their claims were extracted and their verdicts were not: "
          "those claims are stored, so the resumed run does not pay for them again (last column).")


if __name__ == "__main__":
    main()
