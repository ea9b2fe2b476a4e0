"""What the offline judge's swapped-name rule (``judging/offline/text/substitution.py``) costs: answers/s of
claims + verdicts per language on one core (CPU time, so other work on the machine moves it little), with the
rule and with it switched off in the same process, on the typical RAG rows of ``bench/rag_rows.py``.

    .venv/bin/python bench/offline_swap_cost.py [--rows 6000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import offline_speed
from common import machine, machine_line

from faithfulness_pipeline.judging.offline import rules


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=6000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    base, _ = offline_speed.repeated(args.rows, args.rows)
    rule = rules.may_substitute
    runs: dict[str, list[dict[str, float]]] = {"with the rule": [], "without": []}
    for _ in range(args.repeats):  # taking turns: a drifting machine moves both sides alike
        rules.may_substitute = rule
        runs["with the rule"].append(offline_speed.judge_alone(base))
        rules.may_substitute = lambda *_: False
        runs["without"].append(offline_speed.judge_alone(base))
    rules.may_substitute = rule
    print("| answers/s (CPU), median of runs | en | zh | ko |\n|---|---:|---:|---:|")
    medians = {side: {lang: statistics.median(r[lang] for r in rs) for lang in ("en", "zh", "ko")}
               for side, rs in runs.items()}
    for side, m in medians.items():
        print(f"| {side} | {m['en']:.0f} | {m['zh']:.0f} | {m['ko']:.0f} |")
    ratio = {lang: medians["with the rule"][lang] / medians["without"][lang] for lang in ("en", "zh", "ko")}
    print(f"| with / without | {ratio['en']:.3f} | {ratio['zh']:.3f} | {ratio['ko']:.3f} |")
    print(machine_line({"machine": machine(), "load_average": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
