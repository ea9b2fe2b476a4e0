"""Cold start of the CLI with a model: time from launching ``faithfulness-pipeline score`` to the first
request the judge server receives, and to the end of the run (200 short rows, fake server on 127.0.0.1);
and the client CPU (user + system, ``resource.getrusage``) of a new Python process that scores the same
number of rows in process (``make_judge`` + ``score_frame``, interactive mode) against the same server.

    .venv/bin/python bench/cold_start.py [--base COMMIT] [--runs 5]

"Cold" means a new process that has imported nothing, as every CLI run is; the disk cache is warm (one
unrecorded warm-up run per side first), so the figures are the CPU cost of starting, chiefly
``import litellm``. With ``--base`` the same runs are made from a temporary git worktree of that commit
(removed afterwards), base and this checkout taking turns, and the table compares the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import polars as pl
from common import FAKE_KEY_ENV, ROOT, machine

from faithfulness_pipeline.testing.fakellm import ChatRequest, FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge, typical_rows

ROWS = 200


class _FirstRequest:
    """The scripted judge, noting when the first request of a run arrives (the bench's own clock)."""

    def __init__(self) -> None:
        self.judge = ScriptedJudge()
        self.first: float | None = None
        self._lock = threading.Lock()

    def __call__(self, request: ChatRequest) -> str:
        with self._lock:
            if self.first is None:
                self.first = time.monotonic()
        return self.judge(request)


def _input(folder: Path) -> Path:
    rows = typical_rows(ROWS, seed=5)
    path = folder / "rows.parquet"
    pl.DataFrame({
        "conversation_id": [f"c{i:04d}" for i in range(ROWS)],
        "input": [r.question for r in rows],
        "output": [r.answer for r in rows],
        "context": [list(r.context) for r in rows],
    }).write_parquet(path)
    return path


def one_run(tree: Path, src: Path, out: Path, server: FakeLLMServer, probe: _FirstRequest) -> tuple[float, float]:
    """(seconds to the first request, seconds to the end) of one CLI run from ``tree``."""
    probe.first = None
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP_")}
    env.update(PYTHONPATH=str(tree), FP_BENCH_KEY=os.environ[FAKE_KEY_ENV])
    cmd = [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(src), "-o", str(out), "--quiet",
           "--model", "openai/fake-judge", "--api-base", server.base_url, "--api-key-env", FAKE_KEY_ENV]
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=300, check=False)
    ended = time.monotonic()
    if done.returncode != 0 or probe.first is None:
        raise RuntimeError(f"the CLI run from {tree} failed:\n{done.stderr[-3000:]}")
    return probe.first - started, ended - started


#: Scores ROWS rows in process with the litellm judge against argv[1]; prints the process's CPU seconds.
_IN_PROCESS = r"""
import json, resource, sys
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.scripted import typical_frame
frame = typical_frame(int(sys.argv[2]), seed=5)
imported = cpu()
judge = make_judge(JudgeSettings(model="openai/gpt-4o-mini", api_base=sys.argv[1], api_key_env=sys.argv[3]))
built = cpu()
scored = score_frame(frame, judge)
import tiktoken.registry
print(json.dumps({"imports": imported, "judge": built - imported, "scoring": cpu() - built, "total": cpu(),
                  "pandas": "pandas" in sys.modules, "encodings": sorted(tiktoken.registry.ENCODINGS),
                  "rows": scored.height}))
"""


def in_process_cpu(tree: Path, server: FakeLLMServer) -> dict[str, Any]:
    """CPU seconds of one in-process scoring run from ``tree``: imports, make_judge, score_frame, total."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP_")}
    env.update(PYTHONPATH=str(tree), FP_BENCH_KEY=os.environ[FAKE_KEY_ENV])
    cmd = [sys.executable, "-c", _IN_PROCESS, server.base_url, str(ROWS), FAKE_KEY_ENV]
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the in-process run from {tree} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure_cpu(trees: dict[str, Path], runs: int) -> dict[str, list[dict[str, Any]]]:
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in trees}
    with FakeLLMServer(ScriptedJudge()) as server:
        for tree in trees.values():  # warm-up
            in_process_cpu(tree, server)
        for _ in range(runs):
            for side, tree in trees.items():
                results[side].append(in_process_cpu(tree, server))
    return results


def cpu_report(results: dict[str, list[dict[str, Any]]]) -> str:
    lines = [
        f"In process ({ROWS} rows, `make_judge` + `score_frame`, `openai/gpt-4o-mini` against the fake server in "
        "the bench's process): CPU seconds (user + system) of a new Python process, medians of the runs.",
        "",
        "| code | imports | make_judge | score_frame | whole process | pandas loaded | tiktoken encodings |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for side, values in results.items():
        med = {k: statistics.median(float(v[k]) for v in values) for k in ("imports", "judge", "scoring", "total")}
        last = values[-1]
        lines.append(f"| {side} | {med['imports']:.2f} | {med['judge']:.2f} | {med['scoring']:.2f} | "
                     f"{med['total']:.2f} | {'yes' if last['pandas'] else 'no'} | "
                     f"{', '.join(last['encodings'])} |")
    return "\n".join(lines)


def measure(trees: dict[str, Path], runs: int) -> dict[str, list[tuple[float, float]]]:
    probe = _FirstRequest()
    results: dict[str, list[tuple[float, float]]] = {side: [] for side in trees}
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(probe) as server:
        src = _input(Path(tmp))
        for side, tree in trees.items():  # warm-up: the disk cache, .pyc files
            one_run(tree, src, Path(tmp) / f"warm-{side}.parquet", server, probe)
        for i in range(runs):
            for side, tree in trees.items():  # taking turns: both sides see the same machine speed
                results[side].append(one_run(tree, src, Path(tmp) / f"{side}-{i}.parquet", server, probe))
    return results


def report(results: dict[str, list[tuple[float, float]]], base: str | None, runs: int) -> str:
    command = "`.venv/bin/python bench/cold_start.py" + (f" --base {base}" if base else "") + f" --runs {runs}`"
    lines = [
        "## Cold start: time to the first request",
        "",
        f"{command} — a new CLI process per run (`score` of {ROWS} short RAG rows with `--model`, against the fake "
        "server on 127.0.0.1); medians of the runs, each side taking turns; the disk cache is warm. The time "
        "to the first request is chiefly litellm's import, which the CLI starts on a worker thread at launch "
        "while it checks and reads the input.",
        "",
        "| code | to the first request, s | whole run, s | rows/s | every run: first request / whole |",
        "|---|---:|---:|---:|---|",
    ]
    for side, values in results.items():
        first = statistics.median(v[0] for v in values)
        whole = statistics.median(v[1] for v in values)
        each = ", ".join(f"{a:.2f} / {b:.2f}" for a, b in values)
        lines.append(f"| {side} | {first:.2f} | {whole:.2f} | {ROWS / whole:.0f} | {each} |")
    if base is not None and len(results) == 2:
        (_, before), (_, after) = results.items()
        ratio = statistics.median(v[0] for v in after) / statistics.median(v[0] for v in before)
        lines += ["", f"This checkout / base, time to the first request: {ratio:.3f}."]
    lines += ["", f"Machine: {machine()}; 1-minute load average at the end {os.getloadavg()[0]:.1f}."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default=None, help="also measure this commit (a temporary git worktree)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    trees = {"this checkout": ROOT}
    with tempfile.TemporaryDirectory() as tmp:
        base_tree = Path(tmp) / "base"
        if args.base:
            subprocess.run(["git", "worktree", "add", "--detach", str(base_tree), args.base], cwd=ROOT, check=True,
                           capture_output=True)
            trees = {f"base {args.base}": base_tree, "this checkout": ROOT}
        try:
            results = measure(trees, args.runs)
            cpu = measure_cpu(trees, args.runs)
        finally:
            if args.base:
                subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=ROOT, check=False,
                               capture_output=True)
    print(report(results, args.base, args.runs))
    print()
    print(cpu_report(cpu))


if __name__ == "__main__":
    main()
