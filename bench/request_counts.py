"""Requests, prompt and completion tokens per answer: packed and shared vs. an unpacked, unshared baseline.

Runs the litellm judge over real HTTP against the fake server (scripted replies, cl100k token counts) on
the sample data and on generated typical RAG rows, at the default pack budget and a sweep of budgets.
The baseline sends one extraction and one verdict request per answer *per scorer* (pack size 1, every
step done twice), which is what Mastra's two scorers do minus their reason calls.

    .venv/bin/python bench/request_counts.py [--rows 300]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import polars as pl
from common import litellm_judge, sample_rows, score
from rag_rows import make_rows

from faithfulness_pipeline.settings.judge import DEFAULT_PACK_TOKENS
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge


@dataclass
class Usage:
    label: str
    answers: int
    requests: int
    prompt_tokens: int
    completion_tokens: int

    def row(self) -> str:
        n = max(self.answers, 1)
        return (f"| {self.label} | {self.answers} | {self.requests / n:.3f} | {self.prompt_tokens / n:.0f} | "
                f"{self.completion_tokens / n:.0f} |")


def _answers(df: pl.DataFrame) -> int:
    return df.filter(pl.col("output").str.strip_chars().str.len_chars() > 0).height


def measure(server: FakeLLMServer, df: pl.DataFrame, label: str, passes: int = 1, **judge: object) -> Usage:
    server.reset_stats()
    for _ in range(passes):
        score(df, litellm_judge(server.base_url, **judge))
    stats = server.stats()
    return Usage(label, _answers(df), stats.requests, stats.prompt_tokens, stats.completion_tokens)


def run(rows: int) -> tuple[list[Usage], list[Usage]]:
    rag = make_rows(rows, seed=7)
    sample = sample_rows()
    main: list[Usage] = []
    sweep: list[Usage] = []
    with FakeLLMServer(ScriptedJudge()) as server:
        main.append(measure(server, sample, f"sample data, packed (budget {DEFAULT_PACK_TOKENS})"))
        main.append(measure(server, sample, "sample data, baseline (unpacked, per scorer)", passes=2,
                            max_items_per_pack=1))
        for lang in ("en", "zh", "ko"):
            part = rag.filter(pl.col("language") == lang)
            main.append(measure(server, part, f"typical RAG rows ({lang}), packed"))
        main.append(measure(server, rag, f"typical RAG rows (all), packed (budget {DEFAULT_PACK_TOKENS})"))
        main.append(measure(server, rag, "typical RAG rows (all), baseline (unpacked, per scorer)", passes=2,
                            max_items_per_pack=1))
        for budget in (2000, 4000, 8000, 16000, 32000):
            sweep.append(measure(server, rag, f"budget {budget}", pack_tokens=budget, max_items_per_pack=64,
                                 context_window=128_000))
    return main, sweep


def report(main: list[Usage], sweep: list[Usage]) -> str:
    head = "| rows | answers | requests/answer | prompt tokens/answer | completion tokens/answer |\n|---|---:|---:|---:|---:|"
    mixed = next(u for u in main if u.label.startswith("typical RAG rows (all), packed"))
    sample = main[0]
    per = [u.requests / max(u.answers, 1) for u in (mixed, sample)]
    verdict = "met" if max(per) <= 0.5 else "NOT met"
    lines = [
        "# Requests and tokens per answer",
        "",
        "The litellm judge over real HTTP against the fake server (scripted replies, cl100k token counts), on the",
        "sample data and on generated typical RAG rows (`bench/rag_rows.py`: 3–6 sentence answers, 3–8 passages",
        "of 60–150 words, en/zh/ko in thirds), next to an unpacked, unshared baseline (one extraction and one",
        "verdict request per answer per scorer) run on the same rows in the same run.",
        "",
        f"Target ≤ 0.5 requests per answer for both scores at the default budget: typical rows {per[0]:.3f}, "
        f"sample data {per[1]:.3f}: {verdict}.",
        "",
        "Both scores together (one shared extraction + one verdict pass per answer).",
        "",
        head,
    ]
    lines += [u.row() for u in main]
    lines += ["", "Pack budget sweep on the typical RAG rows (max 64 items per pack, 128k-token window):", "", head]
    lines += [u.row() for u in sweep]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=300)
    args = parser.parse_args()
    print(report(*run(args.rows)))
