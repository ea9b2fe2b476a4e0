"""A span run killed mid-staging (SIGKILL: no cleanup runs) leaves its staged conversations, the users' text,
in the temporary folder; the next run sweeps them (issue 52). A real CLI subprocess, really killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl

from faithfulness_pipeline.traces.staging import WORK_PREFIX, staging_folder, sweep_dead_staging
from tests.traces.otlp_files import oi_llm, request, span, write_export


def _export(path: Path, traces: int) -> Path:
    spans = [span(f"{i:032x}", f"{i:016x}", "llm", oi_llm("济州岛在哪里？", "제주도는 한국 남쪽에 있습니다."), 0.0)
             for i in range(1, traces + 1)]
    return write_export(path, [request(spans[i:i + 2_000]) for i in range(0, len(spans), 2_000)])


def _cli(*args: str, tmpdir: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")} | {"TMPDIR": str(tmpdir)}
    return subprocess.Popen([sys.executable, "-m", "faithfulness_pipeline.cli", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _staged(tmpdir: Path) -> list[Path]:
    return [p for p in tmpdir.iterdir() if p.name.startswith(WORK_PREFIX)]


def _staged_bytes(tmpdir: Path) -> int:
    total = 0
    for folder in _staged(tmpdir):
        for staged in folder.iterdir():
            try:
                total += staged.stat().st_size
            except FileNotFoundError:  # the run moved on from its facts file between listing and looking
                continue
    return total


def test_staged_text_of_a_killed_run_is_swept_by_the_next(tmp_path: Path) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    big = _export(tmp_path / "big.jsonl", 40_000)
    killed = _cli("score", str(big), "-o", str(tmp_path / "never.parquet"), "--quiet", tmpdir=tmpdir)
    deadline = time.monotonic() + 120
    while _staged_bytes(tmpdir) < 4_096:  # the run has staged text
        assert killed.poll() is None, killed.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.communicate()
    left = _staged(tmpdir)
    assert len(left) == 1 and f"-{killed.pid}-" in left[0].name and any(left[0].iterdir())
    # a live process's folder (this test's own) stays: only the dead are swept
    with staging_folder(str(tmpdir)) as live:
        again = _cli("score", str(_export(tmp_path / "small.jsonl", 2)), "-o", str(tmp_path / "o.parquet"),
                     tmpdir=tmpdir)
        _, err = again.communicate(timeout=120)
        assert again.returncode == 0, err
        assert [p.name for p in _staged(tmpdir)] == [Path(live).name]  # the killed run's folder is gone
    assert pl.read_parquet(tmp_path / "o.parquet").height == 2
    assert _staged(tmpdir) == [] and sweep_dead_staging(str(tmpdir)) == []
