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

Two more libraries on the same days. truescore's ``ppi_estimate`` is the same PPI++ estimator fed the rows
without a label as its judged term (given those, its estimate is ours: tests/core/test_ppi.py), so its estimate
differs a little from ours here, and its interval adds that term's variance and widens to Wilson's on rare
labels. judgy's ``estimate_success_rate`` is another method: the Rogan-Gladen correction (the judge's share
inverted through its true-positive and true-negative rates measured on the labels, clipped to [0, 1]) with a
percentile bootstrap of the labels; it gives no figure where the labels hold one class only or the measured
rates sum to 1 or less. Its bootstrap is a Python loop (20 ms a day at 1,000 resamples), so it runs on the first
``--judgy-days`` days of each setting with ``--judgy-bootstrap`` resamples (its default is 20,000), seeded
through numpy's global generator (which it draws from); the other columns do not draw from that generator.
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
#: judgy's interval is a Python loop over resamples: a share of the days, fewer resamples than its default.
JUDGY_DAYS = 200
JUDGY_BOOTSTRAP = 1000


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


def _judgy(y: np.ndarray, f: np.ndarray, f_rest: np.ndarray, bootstrap: int) -> tuple[float, float, float] | None:
    """judgy's (estimate, low, high), None where it refuses (one class among the labels, a judge no better than
    chance on them)."""
    import judgy

    try:
        estimate, low, high = judgy.estimate_success_rate(y.astype(int), f.astype(int), f_rest.astype(int),
                                                          bootstrap_iterations=bootstrap)
    except (ValueError, RuntimeError):
        return None
    return estimate, low, high


def simulate(judge: str, truth: np.ndarray, flags: np.ndarray | None, rate: float, labelled: int, days: int,
             rows: int, rng: np.random.Generator, tpr_fpr: tuple[float, float] | None, judgy_days: int = JUDGY_DAYS,
             judgy_bootstrap: int = JUDGY_BOOTSTRAP) -> dict[str, Any]:
    import ppi_py
    import truescore

    errors: dict[str, list[float]] = {"raw": [], "corrected": [], "labels": [], "ppi_py": [], "truescore": [],
                                      "judgy": []}
    covered = {"corrected": 0, "labels": 0, "ppi_py": 0, "truescore": 0, "judgy": 0, "corrected_judgy_days": 0}
    widths: dict[str, list[float]] = {"corrected": [], "labels": [], "ppi_py": [], "truescore": [], "judgy": []}
    for day in range(days):
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
        theirs = truescore.ppi_estimate(f_all, y, sample)
        errors["truescore"].append(theirs.point - true)
        covered["truescore"] += theirs.low <= true <= theirs.high
        widths["truescore"].append(theirs.high - theirs.low)
        if day < judgy_days:
            ours = ppi_mean(y, f, f_all)
            assert ours.low is not None and ours.high is not None
            covered["corrected_judgy_days"] += ours.low <= true <= ours.high
            answer = _judgy(y, f, np.delete(f_all, sample), judgy_bootstrap)
            if answer is not None:
                errors["judgy"].append(answer[0] - true)
                covered["judgy"] += answer[1] <= true <= answer[2]
                widths["judgy"].append(answer[2] - answer[1])
    judged = min(days, judgy_days)
    answered = len(errors["judgy"])
    coverage = {k: v / days for k, v in covered.items()}
    # judgy's coverage is over the days it gave a figure on; ours beside it over the same first days
    coverage["judgy"] = covered["judgy"] / answered if answered else float("nan")
    coverage["corrected_judgy_days"] = covered["corrected_judgy_days"] / judged if judged else float("nan")
    return {"judge": judge, "rate": rate, "labelled": labelled, "judgy_days": judged, "judgy_answered": answered,
            "bias": {k: float(np.mean(v)) if v else float("nan") for k, v in errors.items()},
            "coverage": coverage,
            "width": {k: float(np.mean(v)) if v else float("nan") for k, v in widths.items()}}


def run(days: int, rows: int, seed: int, data: Path, judgy_days: int = JUDGY_DAYS,
        judgy_bootstrap: int = JUDGY_BOOTSTRAP) -> dict[str, Any]:
    started = time.perf_counter()
    truth, flags = offline_flags(data)
    rng = np.random.default_rng(seed)
    np.random.seed(seed)  # judgy draws its resamples from numpy's global generator
    judges: dict[str, tuple[np.ndarray | None, tuple[float, float] | None]] = {"offline": (flags, None)}
    judges.update({name: (None, rates) for name, rates in SYNTHETIC.items()})
    results = [simulate(name, truth, judge_flags, rate, n, days, rows, rng, rates, judgy_days, judgy_bootstrap)
               for name, (judge_flags, rates) in judges.items() for rate in RATES for n in LABELS]
    tpr = float(flags[truth].mean())
    fpr = float(flags[~truth].mean())
    return {"days": days, "rows": rows, "seed": seed, "judgy_days": min(days, judgy_days),
            "judgy_bootstrap": judgy_bootstrap, "results": results, "offline_tpr": tpr, "offline_fpr": fpr,
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
        f"interval at lam = 0; *ppi-python* its `ppi_mean_ci` on the same data; *truescore* its `ppi_estimate` "
        "(the same PPI++ estimator, its judged term over the rows without a label) on the same data; *judgy* its "
        "`estimate_success_rate` (Rogan-Gladen with a percentile bootstrap, another method) on the first "
        f"{result['judgy_days']:,} days of each setting with {result['judgy_bootstrap']:,} resamples: *days* is "
        "how many of them it gave a figure on, its bias and coverage are over those, and *ours on its days* is "
        f"our coverage over the same {result['judgy_days']:,} days. {result['seconds']:.0f} s.",
        "",
        "| judge | true share | labels | judge's share: bias | corrected: bias | corrected: coverage | corrected: "
        "width | labels alone: coverage | labels alone: width | ppi-python: coverage | ppi-python: width | "
        "truescore: bias | truescore: coverage | truescore: width | judgy: days | judgy: bias | judgy: coverage | "
        "ours on its days: coverage | judgy: width |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["results"]:
        b, c, w = r["bias"], r["coverage"], r["width"]
        lines.append(f"| {r['judge']} | {r['rate']:.0%} | {r['labelled']} | {b['raw']:+.3f} | {b['corrected']:+.4f} "
                     f"| {c['corrected']:.3f} | {w['corrected']:.3f} | {c['labels']:.3f} | {w['labels']:.3f} | "
                     f"{c['ppi_py']:.3f} | {w['ppi_py']:.3f} | {b['truescore']:+.4f} | {c['truescore']:.3f} | "
                     f"{w['truescore']:.3f} | {r['judgy_answered']} | {b['judgy']:+.4f} | {c['judgy']:.3f} | "
                     f"{c['corrected_judgy_days']:.3f} | {w['judgy']:.3f} |")
    lines += ["", machine_line(result)]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--days", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=53)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--judgy-days", type=int, default=JUDGY_DAYS, help="days of each setting judgy runs on")
    parser.add_argument("--judgy-bootstrap", type=int, default=JUDGY_BOOTSTRAP, help="judgy's resamples a day")
    args = parser.parse_args()
    if not args.data.exists():
        sys.exit(f"{args.data} is not there: the simulation draws its days from the shared labelled dev rows")
    print(report(run(args.days, args.rows, args.seed, args.data, args.judgy_days, args.judgy_bootstrap)))
