"""Corrected figures by simulation: bias, coverage and width of the prediction-powered share over the threshold.

    .venv/bin/python bench/corrected.py [--days 1000] [--rows 2000] [--seed 53] [--data PATH]

Each simulated day is drawn from the human-labelled rows of ``../shared/datasets/dev`` (with replacement):
``--rows`` answers of which a set share (2, 5, 10, 20 %) people call hallucinated, so the day's true share is
known. A judge says of each answer whether it is over the threshold: the offline judge as shipped (its real flags
on those rows, scored once here), and two judges whose flags are drawn from the label with set error rates (a
good one, true-positive rate 0.9 and false-positive rate 0.1; a weak one, 0.6 and 0.3). People label 50 to 400 of
the day's answers drawn at random. For each of ``--days`` days and each setting the table reports, over the
days: the judge's raw share and the corrected estimate's mean error against the truth (bias), how often the 95 %
interval holds the truth (coverage), and its mean width; beside it the labels alone (the same interval at
``lam = 0``) and ppi-python's own interval on the same data (its estimate is ours: tests/core/test_ppi.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from common import ROOT, machine, machine_line

from faithfulness_pipeline.core.ppi import ppi_mean

DEFAULT_DATA = ROOT.parent / "shared" / "datasets" / "dev" / "conversations_labeled.parquet"
RATES = (0.02, 0.05, 0.10, 0.20)
LABELS = (50, 100, 200, 400)
SYNTHETIC = {"good (0.9 / 0.1)": (0.9, 0.1), "weak (0.6 / 0.3)": (0.6, 0.3)}


def offline_flags(data: Path) -> tuple[np.ndarray, np.ndarray]:
    """(people's label, the offline judge's flag over the default threshold) of every dev row."""
    import polars as pl
    from common import score

    from faithfulness_pipeline.judging.offline.judge import OfflineJudge

    rows = pl.read_parquet(data)
    scored = score(rows, OfflineJudge())
    flags = (scored.get_column("hallucination_score").fill_null(0.0) > 0.5).to_numpy()
    return rows.get_column("label_hallucinated").to_numpy().astype(bool), flags


def _day(rng: np.random.Generator, labels: np.ndarray, rows: int, rate: float) -> np.ndarray:
    """Indices of ``rows`` dev rows, ``rate`` of them hallucinated by people's label."""
    positive, negative = np.flatnonzero(labels), np.flatnonzero(~labels)
    bad = rng.binomial(rows, rate)
    return np.concatenate([rng.choice(positive, bad), rng.choice(negative, rows - bad)])


def simulate(judge: str, truth: np.ndarray, flags: np.ndarray | None, rate: float, labelled: int, days: int,
             rows: int, rng: np.random.Generator, tpr_fpr: tuple[float, float] | None) -> dict[str, Any]:
    import ppi_py

    errors: dict[str, list[float]] = {"raw": [], "corrected": [], "labels": [], "ppi_py": []}
    covered = {"corrected": 0, "labels": 0, "ppi_py": 0}
    widths: dict[str, list[float]] = {"corrected": [], "labels": [], "ppi_py": []}
    for _ in range(days):
        picked = _day(rng, truth, rows, rate)
        y_all = truth[picked].astype(float)
        if tpr_fpr is None:
            assert flags is not None
            f_all = flags[picked].astype(float)
        else:
            tpr, fpr = tpr_fpr
            f_all = np.where(y_all == 1, rng.random(rows) < tpr, rng.random(rows) < fpr).astype(float)
        sample = rng.choice(rows, labelled, replace=False)
        y, f = y_all[sample], f_all[sample]
        true = y_all.mean()
        errors["raw"].append(f_all.mean() - true)
        for name, result in (("corrected", ppi_mean(y, f, f_all)), ("labels", ppi_mean(y, f, f_all, lam=0.0))):
            assert result.estimate is not None and result.low is not None and result.high is not None
            errors[name].append(result.estimate - true)
            covered[name] += result.low <= true <= result.high
            widths[name].append(result.high - result.low)
        low, high = (float(np.squeeze(b)) for b in ppi_py.ppi_mean_ci(y, f, f_all, alpha=0.05))
        errors["ppi_py"].append((low + high) / 2 - true)
        covered["ppi_py"] += low <= true <= high
        widths["ppi_py"].append(high - low)
    return {"judge": judge, "rate": rate, "labelled": labelled,
            "bias": {k: float(np.mean(v)) for k, v in errors.items()},
            "coverage": {k: v / days for k, v in covered.items()},
            "width": {k: float(np.mean(v)) for k, v in widths.items()}}


def run(days: int, rows: int, seed: int, data: Path) -> dict[str, Any]:
    started = time.perf_counter()
    truth, flags = offline_flags(data)
    rng = np.random.default_rng(seed)
    judges: dict[str, tuple[np.ndarray | None, tuple[float, float] | None]] = {"offline": (flags, None)}
    judges.update({name: (None, rates) for name, rates in SYNTHETIC.items()})
    results = [simulate(name, truth, judge_flags, rate, n, days, rows, rng, rates)
               for name, (judge_flags, rates) in judges.items() for rate in RATES for n in LABELS]
    tpr = float(flags[truth].mean())
    fpr = float(flags[~truth].mean())
    return {"days": days, "rows": rows, "seed": seed, "results": results, "offline_tpr": tpr, "offline_fpr": fpr,
            "seconds": time.perf_counter() - started, "machine": machine(),
            "load_average": __import__("os").getloadavg()[0]}


def report(result: dict[str, Any]) -> str:
    lines = [
        "## Corrected figures: bias, coverage and width by simulation (issue 51)",
        "",
        f"`.venv/bin/python bench/corrected.py --days {result['days']} --rows {result['rows']} --seed "
        f"{result['seed']}` — {result['days']:,} simulated days of {result['rows']:,} answers per setting, drawn "
        "from the 300 human-labelled dev rows at a set true share; the offline judge's own flags on those rows "
        f"(true-positive rate {result['offline_tpr']:.2f}, false-positive rate {result['offline_fpr']:.2f} there), "
        "and two judges with drawn flags. Bias: mean error of the figure against the day's true share; coverage: "
        "share of days whose 95 % interval holds it; width: mean width of the interval. *Labels alone* is the same "
        f"interval at lam = 0; *ppi-python* its `ppi_mean_ci` on the same data. {result['seconds']:.0f} s.",
        "",
        "| judge | true share | labels | judge's share: bias | corrected: bias | corrected: coverage | corrected: "
        "width | labels alone: coverage | labels alone: width | ppi-python: coverage | ppi-python: width |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["results"]:
        b, c, w = r["bias"], r["coverage"], r["width"]
        lines.append(f"| {r['judge']} | {r['rate']:.0%} | {r['labelled']} | {b['raw']:+.3f} | {b['corrected']:+.4f} "
                     f"| {c['corrected']:.3f} | {w['corrected']:.3f} | {c['labels']:.3f} | {w['labels']:.3f} | "
                     f"{c['ppi_py']:.3f} | {w['ppi_py']:.3f} |")
    lines += ["", machine_line(result)]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--days", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=53)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    if not args.data.exists():
        sys.exit(f"{args.data} is not there: the simulation draws its days from the shared labelled dev rows")
    print(report(run(args.days, args.rows, args.seed, args.data)))
