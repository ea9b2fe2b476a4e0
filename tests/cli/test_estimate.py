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
