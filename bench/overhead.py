"""Client overhead: our process's CPU seconds per answer against a zero-latency server in another process.

The fake server runs as its own process (``python -m faithfulness_pipeline.testing.fakellm``, scripted replies, no latency), so
its JSON, tokenising and HTTP work is not billed to us. Around scoring we read ``getrusage(RUSAGE_SELF)``
(user + system CPU of every thread of this process). ``import litellm``, the judge's construction and a
small warm-up run happen before the measurement: they are one-time costs, not per-answer ones.

    .venv/bin/python bench/overhead.py [--rows 3000] [--profile]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import polars as pl
from common import FAKE_KEY_ENV, ROOT, add_pack_options, machine, machine_line, pack_overrides, score
from rag_rows import make_rows

TARGET_MS_PER_ANSWER = 2.0
RESPONDER = "faithfulness_pipeline.testing.scripted:RESPONDER"
#: The judge model of the benchmarks: a model litellm knows (window, output limit, JSON-schema support,
#: prices), served by the fake server through ``api_base``: what a user scoring with gpt-4o-mini runs.
BENCH_MODEL = "openai/gpt-4o-mini"


def bench_judge(base_url: str, *, store_path: Path | None = None, **overrides: Any) -> Any:
    """The litellm judge at its defaults, for ``BENCH_MODEL`` served by the fake server at ``base_url``,
    in the judge stack as the CLI builds it; with a result store at ``store_path`` if given."""
    from faithfulness_pipeline.cli.process import freeze_loaded_objects
    from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
    from faithfulness_pipeline.judging.stack import JudgeStack
    from faithfulness_pipeline.judging.store.open import open_store
    from faithfulness_pipeline.settings.judge import JudgeSettings

    # Whole replies, as gpt-4o-mini at OpenAI's own API gets them (--stream auto); behind the fake server's
    # api_base auto would stream.
    settings: dict[str, Any] = {"model": BENCH_MODEL, "api_base": base_url, "api_key_env": FAKE_KEY_ENV,
                                "stream": "no"}
    settings.update(overrides)
    # The judge as the CLI builds it (the judge stack, with a store when one is given), and what the
    # CLI does for its own process once its judge is built (faithfulness_pipeline.cli.process).
    judge = JudgeStack(LiteLLMJudge(JudgeSettings(**settings)), None if store_path is None else open_store(store_path))
    freeze_loaded_objects()
    return judge


class ServerProcess:
    """``python -m faithfulness_pipeline.testing.fakellm`` as a child process; ``stats()`` reads its counters over HTTP."""

    def __init__(self, responder: str = RESPONDER, *, base_ms: float = 0.0, per_token_ms: float = 0.0,
                 max_in_flight: int | None = None) -> None:
        self.args = [sys.executable, "-m", "faithfulness_pipeline.testing.fakellm", "--responder", responder,
                     "--base-ms", str(base_ms), "--per-token-ms", str(per_token_ms)]
        if max_in_flight is not None:
            self.args += ["--max-in-flight", str(max_in_flight)]
        self.proc: subprocess.Popen[str] | None = None
        self.base_url = ""

    def __enter__(self) -> ServerProcess:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(self.args, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("READY "):
            self.proc.kill()
            raise RuntimeError(f"fake server did not start: {line!r}")
        self.base_url = line.split(" ", 1)[1]
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def stats(self) -> dict[str, Any]:
        root = self.base_url.removesuffix("/v1")
        with urllib.request.urlopen(f"{root}/fakellm/stats", timeout=10) as response:
            data: dict[str, Any] = json.loads(response.read())
        return data


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(rows: int = 3000, seed: int = 21, profile: Path | None = None, **judge: Any) -> dict[str, Any]:
    """CPU seconds per answer of scoring ``rows`` typical RAG rows (no store, every answer sent)."""
    import faithfulness_pipeline.judging.llm.judge  # noqa: F401  (the one-time litellm import)

    frame = make_rows(rows, seed=seed)
    warm = make_rows(60, seed=seed + 1000).with_columns(pl.col("conversation_id") + "-warm")
    with ServerProcess() as server:
        score(warm, bench_judge(server.base_url, **judge))  # first-call costs: connection pool, lazy imports
        scorer = bench_judge(server.base_url, **judge)
        before = server.stats()
        profiler = None
        if profile is not None:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        cpu0, wall0 = _cpu_s(), time.perf_counter()
        scored = score(frame, scorer)
        cpu, wall = _cpu_s() - cpu0, time.perf_counter() - wall0
        if profiler is not None and profile is not None:
            profiler.disable()
            profiler.dump_stats(str(profile))
        after = server.stats()
    answers = frame.height
    ok = scored.filter(pl.col("status") == "ok").height
    return {
        "rows": answers,
        "ok_rows": ok,
        "requests": after["requests"] - before["requests"],
        "cpu_s": cpu,
        "wall_s": wall,
        "cpu_ms_per_answer": 1000 * cpu / answers,
        "answers_per_s": answers / wall,
        "target_ms_per_answer": TARGET_MS_PER_ANSWER,
        "machine": machine(),
        "load_average": os.getloadavg()[0],  # other processes on the machine skew timings: say so
    }


def report(result: dict[str, Any]) -> str:
    met = "met" if result["cpu_ms_per_answer"] <= result["target_ms_per_answer"] else "MISSED"
    return "\n".join([
        "## Client overhead",
        "",
        "`.venv/bin/python bench/overhead.py` — our process's CPU time (user + system, all threads, "
        "`getrusage(RUSAGE_SELF)`) while scoring typical RAG rows end to end (`score_frame_async` with the "
        "litellm judge) against a zero-latency fake server running in a separate process. The one-time "
        "`import litellm`, the judge's construction and a 60-row warm-up are excluded.",
        "",
        "| rows | requests | CPU s | CPU ms/answer | target | wall s |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {result['rows']} | {result['requests']} | {result['cpu_s']:.2f} | "
        f"**{result['cpu_ms_per_answer']:.2f}** | ≤ {result['target_ms_per_answer']:g} ({met}) | "
        f"{result['wall_s']:.2f} |",
        "",
        machine_line(result),
    ])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--profile", type=Path, default=None, help="write cProfile stats of the scoring here")
    add_pack_options(parser)
    args = parser.parse_args()
    overrides = pack_overrides(args)
    print(report(run(args.rows, profile=args.profile, **overrides)))
