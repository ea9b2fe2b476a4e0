"""``review sample --half-width``: each stratum sized by what its interval needs, fewer labels where the judge's
measured agreement with people is better, and the samples of narrower intervals holding the wider ones'."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP_")}
    return subprocess.run([sys.executable, "-m", "faithfulness_pipeline.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=180, check=False)


def _world(tmp_path: Path, agreement: float) -> tuple[Path, Path]:
    """Two strata of 5,000 answers (seed 64), 20 % hallucinated, a judge that agrees with people on
    ``agreement`` of them, and 400 labelled answers of each."""
    rng = np.random.default_rng(64)
    frames, labels = [], []
    for language in ("en", "ko"):
        truth = rng.random(5000) < 0.2
        flag = np.where(rng.random(5000) < agreement, truth, ~truth)
        keys = [f"{language}-{i}" for i in range(5000)]
        frames.append(pl.DataFrame({"row_key": keys, "status": "ok", "model": "m", "language": language,
                                    "created_at": datetime(2026, 11, 25, 12, tzinfo=UTC),
                                    "hallucination_score": np.where(flag, 1.0, 0.0)}))
        picked = rng.choice(5000, 400, replace=False)
        labels.append(pl.DataFrame({"row_key": [keys[i] for i in picked],
                                    "label_hallucinated": [bool(truth[i]) for i in picked]}))
    scored, labelled = tmp_path / f"scored-{agreement}.parquet", tmp_path / f"labels-{agreement}.parquet"
    pl.concat(frames).write_parquet(scored)
    pl.concat(labels).write_parquet(labelled)
    return scored, labelled


def _drawn(tmp_path: Path, name: str, *args: str) -> pl.DataFrame:
    done = _cli("review", "sample", *args, "-o", str(tmp_path / name), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "sized for a 95 % interval" in done.stdout
    return pl.read_parquet(tmp_path / name)


def test_a_better_judge_needs_fewer_labels_for_the_same_interval(tmp_path: Path) -> None:
    weak, weak_labels = _world(tmp_path, 0.7)
    good, good_labels = _world(tmp_path, 0.97)
    alone = _drawn(tmp_path, "alone.parquet", str(weak), "--half-width", "0.05")
    with_weak = _drawn(tmp_path, "weak.parquet", str(weak), "--half-width", "0.05", "--labels", str(weak_labels))
    with_good = _drawn(tmp_path, "good.parquet", str(good), "--half-width", "0.05", "--labels", str(good_labels))
    per = {name: frame.group_by("language").len().sort("language").get_column("len").to_list()
           for name, frame in (("alone", alone), ("weak", with_weak), ("good", with_good))}
    # the labels-alone bound: 0.25 / (0.05 / 1.96)^2 = 385 labels a stratum
    assert per["alone"] == [385, 385]
    assert all(g < w <= a for g, w, a in zip(per["good"], per["weak"], per["alone"], strict=True))
    assert per["good"][0] < 0.5 * per["alone"][0]


def test_a_narrower_interval_draws_a_sample_that_holds_the_wider_ones(tmp_path: Path) -> None:
    scored, _ = _world(tmp_path, 0.8)
    wide = set(_drawn(tmp_path, "wide.parquet", str(scored), "--half-width", "0.1").get_column("row_key"))
    narrow = set(_drawn(tmp_path, "narrow.parquet", str(scored), "--half-width", "0.05").get_column("row_key"))
    assert wide < narrow


def test_size_and_half_width_are_one_or_the_other(tmp_path: Path) -> None:
    scored, _ = _world(tmp_path, 0.8)
    done = _cli("review", "sample", str(scored), "--half-width", "0.1", "--size", "5", "-o",
                str(tmp_path / "q.parquet"), cwd=tmp_path)
    assert done.returncode == 2 and "--size or --half-width" in done.stderr
