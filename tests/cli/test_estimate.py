"""``faithfulness-pipeline estimate``, run as a real subprocess on real Parquet files: scored tables and people's
labels in, the corrected figures per group out, every label accounted for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[2]
LABELLED = ROOT / "sample_labelled" / "conversations_labelled.parquet"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP_")}
    return subprocess.run([sys.executable, "-m", "faithfulness_pipeline.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=180, check=False)


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("estimate") / "scored.parquet"
    done = _cli("score", str(LABELLED), "-o", str(out), "--quiet", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return out


def test_a_census_of_labels_gives_the_labels_own_figures_with_no_doubt(scored: Path, tmp_path: Path) -> None:
    out = tmp_path / "corrected.parquet"
    done = _cli("estimate", str(scored), "--labels", str(LABELLED), "--by", "", "--min-labels", "5", "-o", str(out),
                cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    row = pl.read_parquet(out).row(0, named=True)
    labels = pl.read_parquet(LABELLED)
    assert row["labelled_answers"] == labels.height == row["answers"]
    assert row["over_threshold_share_corrected"] == pytest.approx(labels.get_column("label_hallucinated").mean())
    assert row["faithfulness_mean_corrected"] == pytest.approx(labels.get_column("label_faithfulness").mean())
    assert row["hallucination_mean_corrected"] == pytest.approx(1 - labels.get_column("label_faithfulness").mean())
    # every row labelled: the figures are known, and the interval says so
    assert row["over_threshold_share_corrected_low"] == pytest.approx(row["over_threshold_share_corrected_high"])
    assert "21 of 21 labelled answer(s) correct the figures" in done.stderr
    assert "over_threshold_share" in done.stdout and "judge" in done.stdout


def test_labels_by_conversation_id_and_labels_of_no_scored_row_are_named(scored: Path, tmp_path: Path) -> None:
    labels = pl.read_parquet(LABELLED).select("conversation_id", "label_hallucinated")
    extra = pl.DataFrame({"conversation_id": ["not-scored-1"], "label_hallucinated": [True]})
    path = tmp_path / "labels.parquet"
    pl.concat([labels.head(12), extra]).write_parquet(path)
    done = _cli("estimate", str(scored), "--labels", str(path), "--by", "language", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "12 of 13 labelled answer(s) correct the figures" in done.stderr
    assert "1 labelled answer(s) match no scored row" in done.stderr and "not-scored-1" in done.stderr


@pytest.mark.parametrize(("args", "says"), [
    (["--by", "no_such_column"], "--by names ['no_such_column']"),
    (["-o", "SCORED"], "is also an input file"),
])
def test_bad_requests_are_one_line_and_exit_2(scored: Path, tmp_path: Path, args: list[str], says: str) -> None:
    args = [str(scored) if a == "SCORED" else a for a in args]
    done = _cli("estimate", str(scored), "--labels", str(LABELLED), *args, cwd=tmp_path)
    assert done.returncode == 2
    assert says in done.stderr and "Traceback" not in done.stderr


def _synthetic(tmp_path: Path) -> tuple[Path, Path]:
    """Two models' answers (seed 63): a judge that flags 30 % of good answers, people who label 200 of each
    model's; model b really hallucinates more (20 % against 5 %)."""
    import numpy as np

    rng = np.random.default_rng(63)
    frames, labels = [], []
    for model, rate in (("a", 0.05), ("b", 0.20)):
        truth = rng.random(2000) < rate
        flag = np.where(truth, rng.random(2000) < 0.8, rng.random(2000) < 0.3)
        keys = [f"{model}-{i}" for i in range(2000)]
        frames.append(pl.DataFrame({"row_key": keys, "model": model, "status": "ok",
                                    "hallucination_score": np.where(flag, 1.0, 0.0),
                                    "faithfulness_score": np.where(flag, 0.0, 1.0)}))
        picked = rng.choice(2000, 200, replace=False)
        labels.append(pl.DataFrame({"row_key": [keys[i] for i in picked],
                                    "label_hallucinated": [bool(truth[i]) for i in picked]}))
    scored, labelled = tmp_path / "scored.parquet", tmp_path / "labels.parquet"
    pl.concat(frames).write_parquet(scored)
    pl.concat(labels).write_parquet(labelled)
    return scored, labelled


def test_compare_prints_the_difference_corrected_by_the_labels(tmp_path: Path) -> None:
    scored, labelled = _synthetic(tmp_path)
    done = _cli("compare", str(scored), "--by", "model", "--labelled", str(labelled), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    corrected = done.stdout.split("corrected by people's labels")[1]
    line = next(li for li in corrected.splitlines() if li.strip().startswith("over_threshold_share"))
    low, high = (float(x) for x in line.split("[")[1].split("]")[0].split(","))
    assert low <= 0.15 <= high and low > 0  # the true difference, and it is larger than the noise
    assert "(200 labels)" in line and "larger than noise" in line
