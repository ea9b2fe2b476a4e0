"""The golden cases: inputs and CLI runs whose outputs must not change when the code's shape does.

``make_golden.py`` wrote the files in this folder with the code of 1793197 (before the judge-layer
redesign); ``test_golden.py`` scores the same inputs with the current code and compares every column but
``scored_at``. Regenerate only for a change that is meant to change scores, and say so in the commit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl

from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge, typical_rows

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
KEY = "sk-golden-0000000000000000"
#: Columns that differ between any two runs by design.
VOLATILE = ("scored_at", "scoring_run_id")
OUTPUTS = ("scored.parquet", "claims.parquet", "mastra.jsonl")


def rag_input(path: Path) -> Path:
    """Typical RAG rows (en / zh / ko) plus the rows that take the short ways: a blank answer, no
    passages, a question-only answer, and rows sharing one passage list."""
    rows = typical_rows(30, seed=11)
    shared = list(rows[0].context)
    frame = pl.DataFrame({
        "conversation_id": [f"g{i:03d}" for i in range(len(rows))] + ["blank", "nocontext", "question", "shared1", "shared2"],
        "input": [r.question for r in rows] + ["Q?", "Q?", "Q?", "Q1?", "Q2?"],
        "output": [r.answer for r in rows] + ["  ", "The bridge opened in 1990.", "Could you say more?",
                                              rows[1].answer, rows[2].answer],
        "context": [list(r.context) for r in rows] + [["p"], [], ["p"], shared, shared],
    })
    frame.write_parquet(path)
    return path


def responder() -> ScriptedJudge:
    return ScriptedJudge(write_out_rate=0.3)


def cli(src: Path, out_dir: Path, *extra: str) -> list[str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    return [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(src), "-o", str(out_dir / "scored.parquet"),
            "--claims-out", str(out_dir / "claims.parquet"), "--mastra-out", str(out_dir / "mastra.jsonl"),
            "--quiet", *extra]


def run(cmd: list[str]) -> None:
    env = {**os.environ, "FP_GOLDEN_KEY": KEY}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{cmd} failed:\n{done.stderr}")


def llm_flags(server: FakeLLMServer) -> list[str]:
    return ["--model", "openai/gpt-4o-mini", "--api-base", server.base_url, "--api-key-env", "FP_GOLDEN_KEY",
            "--timeout", "5"]


def offline_sample(out_dir: Path) -> None:
    run(cli(ROOT / "sample_data" / "flat", out_dir))


def llm_rag(work: Path, out_dir: Path, *extra: str) -> None:
    src = rag_input(work / "rag.parquet")
    with FakeLLMServer(responder(), api_key=KEY) as server:
        run(cli(src, out_dir, *llm_flags(server), *extra))


def comparable(path: Path) -> pl.DataFrame | list[object]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    frame = pl.read_parquet(path)
    return frame.drop([c for c in VOLATILE if c in frame.columns])
