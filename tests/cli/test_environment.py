"""The environment a run finds cannot fail it: a temporary folder too long for the fork server's socket, a
stderr (and stdout) whose reader has gone, a progress callback that raises. Real subprocesses, real files,
real HTTP to the fake server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline import JudgeSettings, make_judge, score_frame
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge, typical_frame
from tests.cli.test_cli import ROOT

KEY = "sk-environment-test"
#: what differs between runs, and the settings hash: the two runs compared ask servers on different ports
IGNORED = [*S.RUN_COLUMNS, S.JUDGE_SETTINGS]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "faithfulness_pipeline.cli", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, cwd=ROOT, timeout=300, check=False)


def _long_tmpdir(tmp_path: Path) -> Path:
    folder = tmp_path / ("a-temporary-folder-name-much-longer-than-the-socket-path-allows-" * 2)
    folder.mkdir()
    assert len(os.fsencode(folder)) > 107
    return folder


def test_a_long_tmpdir_does_not_stop_the_offline_judges_workers(tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    typical_frame(2500, seed=5).write_parquet(src)  # more verdict items than a batch needs to go to workers
    short = _cli("score", str(src), "-o", str(tmp_path / "short.parquet"), "--quiet",
                 env={"FAITHFULNESS_OFFLINE_PROCESSES": "2"})
    assert short.returncode == 0, short.stderr
    long = _cli("score", str(src), "-o", str(tmp_path / "long.parquet"), "--quiet",
                env={"FAITHFULNESS_OFFLINE_PROCESSES": "2", "TMPDIR": str(_long_tmpdir(tmp_path))})
    assert long.returncode == 0, long.stderr
    assert "Traceback" not in long.stderr
    read = [pl.read_parquet(tmp_path / f"{n}.parquet").drop(IGNORED) for n in ("short", "long")]
    assert read[0].equals(read[1])


def test_under_a_long_tmpdir_the_workers_still_share_the_work(tmp_path: Path) -> None:
    # The Python API path: workers start as fresh interpreters instead, and do take pieces.
    script = tmp_path / "score.py"
    script.write_text(
        "from faithfulness_pipeline import score_frame\n"
        "from faithfulness_pipeline.judging.offline.judge import OfflineJudge\n"
        "from faithfulness_pipeline.testing.scripted import typical_frame\n"
        "if __name__ == '__main__':\n"
        "    judge = OfflineJudge(processes=2, parallel_min_items=1)\n"
        "    scored = score_frame(typical_frame(600, seed=2), judge=judge)\n"
        "    print(scored.height, (scored['status'] == 'ok').sum(), judge.worker_pieces)\n",
        encoding="utf-8")
    env = {**os.environ, "TMPDIR": str(_long_tmpdir(tmp_path))}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    rows, ok, pieces = map(int, done.stdout.split())
    assert rows == ok == 600
    assert pieces > 0


@pytest.mark.parametrize("judge", ["offline", "llm"])
def test_a_closed_stderr_pipe_does_not_fail_a_complete_run(tmp_path: Path, judge: str) -> None:
    src = tmp_path / "in.parquet"
    typical_frame(40, seed=6).write_parquet(src)
    extra: list[str] = []
    server = None
    if judge == "llm":
        server = FakeLLMServer(ScriptedJudge(), api_key=KEY).__enter__()
        extra = ["--model", "openai/fake-judge", "--api-base", server.base_url, "--api-key-env", "FP_ENV_KEY"]
    try:
        env = {**os.environ, "FP_ENV_KEY": KEY}
        reference = subprocess.run(
            [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(src), "-o", str(tmp_path / "ref.parquet"),
             *extra], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False)
        assert reference.returncode == 0, reference.stderr
        # `2>&1 | head` once head has gone: both streams are one pipe whose reader is closed before a line.
        read, write = os.pipe()
        os.close(read)
        proc = subprocess.run(
            [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(src), "-o", str(tmp_path / "o.parquet"),
             "--claims-out", str(tmp_path / "c.parquet"), *extra],
            stdout=write, stderr=write, env=env, cwd=ROOT, timeout=300, check=False)
        os.close(write)
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    assert proc.returncode == 0
    assert (tmp_path / "c.parquet").exists()
    scored, ref = (pl.read_parquet(tmp_path / f"{n}.parquet").drop(IGNORED) for n in ("o", "ref"))
    assert scored.equals(ref)


def test_a_closed_stdout_does_not_fail_a_dry_run_or_a_report(tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    typical_frame(10, seed=7).write_parquet(src)
    assert _cli("score", str(src), "-o", str(tmp_path / "s.parquet"), "--quiet").returncode == 0
    for args in (["score", str(src), "-o", str(tmp_path / "x.parquet"), "--dry-run"],
                 ["report", str(tmp_path / "s.parquet"), "-o", str(tmp_path / "r.html")]):
        read, write = os.pipe()
        os.close(read)
        proc = subprocess.run([sys.executable, "-m", "faithfulness_pipeline.cli", *args], stdout=write,
                              stderr=write, cwd=ROOT, timeout=300, check=False)
        os.close(write)
        assert proc.returncode == 0, args
    assert (tmp_path / "r.html").exists()


class _Boom(RuntimeError):
    pass


@pytest.mark.parametrize("judge", ["offline", "llm"])
def test_a_progress_callback_that_raises_fails_no_row(judge: str, caplog: pytest.LogCaptureFixture,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FP_ENV_KEY", KEY)
    frame = typical_frame(20, seed=8)
    calls: list[float] = []

    def progress(rows: float) -> None:
        calls.append(rows)
        if len(calls) >= 2:
            raise _Boom("the notebook's widget is gone")

    def run(with_progress: bool) -> pl.DataFrame:
        if judge == "offline":
            return score_frame(frame, progress=progress if with_progress else None)
        with FakeLLMServer(ScriptedJudge(), api_key=KEY) as server:
            settings = JudgeSettings(model="openai/fake-judge", api_base=server.base_url, api_key_env="FP_ENV_KEY",
                                     max_items_per_pack=1)
            return score_frame(frame, judge=make_judge(settings), progress=progress if with_progress else None)

    reference = run(with_progress=False)
    scored = run(with_progress=True)
    assert len(calls) == 2  # called until it raised, never again
    assert scored.get_column("status").to_list() == ["ok"] * 20
    assert scored.drop(IGNORED).equals(reference.drop(IGNORED))
    assert "progress callback failed" in caplog.text
