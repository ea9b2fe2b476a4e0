"""This checkout against an earlier commit, bench by bench, runs alternating: ratios from the same period.

    .venv/bin/python bench/ab.py 1793197 [--runs 3] [--only fraction64,cpu_ms,warm,offline]

This machine's speed drifts by a third within an hour, so a figure from another hour says little about a
change. Each metric is measured ``--runs`` times on each side, base and this checkout taking turns, every
run in a fresh process that imports that side's code (the base commit is checked out into a temporary git
worktree, removed afterwards); the table gives the medians and their ratio. The metrics are read from the
benches of each side (same function names in both), so both are measured exactly as their own
BENCHMARKS.md run measures them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import ROOT, machine, machine_line

#: metric -> (bench module, Python expression over it giving one number, higher is better)
METRICS: dict[str, tuple[str, str, bool]] = {
    "fraction64": ("throughput", "m.measure(64, 5000, seed=32)['fraction_of_limit']", True),
    "fraction16": ("throughput", "m.measure(16, 2000, seed=31)['fraction_of_limit']", True),
    "cpu_ms": ("overhead", "m.run()['cpu_ms_per_answer']", False),
    "warm": ("warm_rerun", "m.run()['answers_per_s']", True),
    "offline": ("offline_speed", "m.run(rows=50_000, distinct=10_000)['default']['answers_per_s']", True),
}
LABELS = {
    "fraction64": "64 in flight: fraction of the latency-bound limit",
    "fraction16": "16 in flight: fraction of the latency-bound limit",
    "cpu_ms": "client CPU ms per answer (lower is better)",
    "warm": "warm re-run, answers/s",
    "offline": "offline judge, answers/s (50,000 rows)",
}


def measure(tree: Path, metric: str) -> float:
    module, expression = METRICS[metric][:2]
    probe = (f"import json, sys; sys.path.insert(0, {str(tree / 'bench')!r}); import {module} as m; "
             f"print('AB ' + json.dumps({expression}))")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", probe], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=1800, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("AB ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{metric} failed in {tree}:\n{done.stderr[-3000:]}")
    return float(json.loads(lines[-1][3:]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("base", help="the commit to compare with")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default=",".join(METRICS))
    args = parser.parse_args()
    metrics = args.only.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        base_tree = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base_tree), args.base], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            rows = []
            for metric in metrics:
                seen: dict[str, list[float]] = {"base": [], "this": []}
                for _ in range(args.runs):
                    seen["base"].append(measure(base_tree, metric))
                    seen["this"].append(measure(ROOT, metric))
                    print(f"{metric}: base {seen['base'][-1]:.4g}, this {seen['this'][-1]:.4g}", file=sys.stderr)
                base, this = statistics.median(seen["base"]), statistics.median(seen["this"])
                higher_is_better = METRICS[metric][2]
                rows.append(f"| {LABELS[metric]} | {base:.4g} | {this:.4g} | {this / base:.3f} | "
                            f"{'higher' if higher_is_better else 'lower'} | "
                            f"{', '.join(f'{v:.4g}' for v in seen['base'])} / {', '.join(f'{v:.4g}' for v in seen['this'])} |")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=ROOT, check=False,
                           capture_output=True)
    print("\n".join([
        f"## This checkout against {args.base}, runs alternating",
        "",
        f"`.venv/bin/python bench/ab.py {args.base} --runs {args.runs}` — medians of {args.runs} runs a side, base "
        "and this checkout taking turns, each run a fresh process of that side's own bench.",
        "",
        "| metric | base | this | this / base | better when | every run (base / this) |",
        "|---|---:|---:|---:|---|---|",
        *rows,
        "",
        machine_line({"machine": machine(), "load_average": os.getloadavg()[0]}),
    ]))


if __name__ == "__main__":
    main()
