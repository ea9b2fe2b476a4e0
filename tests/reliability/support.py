"""Shared helpers of the reliability suite: input rows, subprocess commands and environments, RSS sampling.

Every run here is a real subprocess (the CLI, ``dg launch``) talking real HTTP to a FakeLLMServer on
127.0.0.1 and writing real Parquet; nothing is monkeypatched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge

REPO = Path(__file__).resolve().parents[2]
DAY = "2026-11-25"
KEY_ENV = "FP_RELIABILITY_KEY"
MODEL = "openai/fake-judge"
#: Columns that legitimately differ between two runs of the same rows: when, where results came from and
#: what this run paid (S.RUN_COLUMNS), the usage shares (a resumed run packs its tail differently), and the
#: judge settings hash, which covers the endpoint: every fake server listens on a port of its own.
RUN_COLUMNS = (*S.RUN_COLUMNS, "llm_calls", "prompt_tokens", "completion_tokens", "cost_usd", S.JUDGE_SETTINGS)
OFFLINE_ENV = {
    "LITELLM_OFFLINE_MODE": "true",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOG": "ERROR",
    "HF_HUB_OFFLINE": "1",
    "DAGSTER_TELEMETRY_DISABLED": "1",
    "PYTHONUNBUFFERED": "1",
}


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI or Dagster subprocess: offline litellm, no inherited FP_/DAGSTER_ settings.

    Where the machine forbids bytecode files (PYTHONDONTWRITEBYTECODE), every subprocess would compile
    litellm from source again (~10 s each); a private cache folder keeps the venv untouched and the
    suite fast, and changes nothing else.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FP_", "DAGSTER_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "fp-reliability-pycache")
    env.update(OFFLINE_ENV)
    env.update(extra)
    return env


# ------------------------------------------------------------------------------------------- rows

_EN = ("The museum", "The bridge", "The library", "The harbour", "The station")
_ZH = ("博物馆", "大桥", "图书馆", "港口", "车站")
_ZH_HANT = ("博物館", "大橋", "圖書館", "港口", "車站")
_KO = ("박물관은", "다리는", "도서관은", "항구는", "역은")
_MARKS = ("", "", "", " [C]", " [U]", " [S?]", " [U?]")


def _row(i: int) -> tuple[str, str, list[str]]:
    """(question, answer, passages) of row ``i``: two or three short sentences in en / zh-Hans / zh-Hant / ko."""
    lang = i % 4
    n, m = i % 5, _MARKS[i % 7]
    year = 1900 + i % 120
    if lang == 0:
        return (
            f"When did item {i} open?",
            f"{_EN[n]} number {i} opened in {year}. It has {i % 9 + 2} floors{m}. Entry costs {i % 13} euros.",
            [f"{_EN[n]} number {i} opened in {year} and has {i % 9 + 2} floors."],
        )
    if lang == 1:
        return (
            f"第{i}号{_ZH[n]}何时开放？",
            f"第{i}号{_ZH[n]}于{year}年开放。它有{i % 9 + 2}层{m}。",
            [f"第{i}号{_ZH[n]}于{year}年开放，共有{i % 9 + 2}层。"],
        )
    if lang == 2:
        return (
            f"第{i}號{_ZH_HANT[n]}何時開放？",
            f"第{i}號{_ZH_HANT[n]}於{year}年開放。門票{i % 13}元{m}。",
            [f"第{i}號{_ZH_HANT[n]}於{year}年開放。"],
        )
    return (
        f"{i}번 시설은 언제 열었나요?",
        f"{i}번 {_KO[n]} {year}년에 문을 열었다. 층수는 {i % 9 + 2}층이다{m}.",
        [f"{i}번 {_KO[n]} {year}년에 문을 열었고 {i % 9 + 2}층 건물이다."],
    )


def short_rows(n: int, *, start: int = 0, day: str = DAY) -> pl.DataFrame:
    """``n`` short RAG rows (one passage each), all on ``day``. Every 50th answer is empty (no call) and
    every 40th row has no context (claims without a verdict call), like real tables."""
    questions, answers, contexts = [], [], []
    for i in range(start, start + n):
        question, answer, passages = _row(i)
        questions.append(question)
        answers.append("" if i % 50 == 49 else answer)
        contexts.append([] if i % 40 == 39 else passages)
    stamp = datetime.fromisoformat(day).replace(hour=12, tzinfo=UTC)
    return pl.DataFrame(
        {
            "conversation_id": [f"conv-{i:06d}" for i in range(start, start + n)],
            "created_at": [stamp] * n,
            "model": [("gpt-a", "gpt-b")[i % 2] for i in range(start, start + n)],
            "input": questions,
            "output": answers,
            "context": contexts,
        },
        schema={
            "conversation_id": pl.String,
            "created_at": pl.Datetime("us", "UTC"),
            "model": pl.String,
            "input": pl.String,
            "output": pl.String,
            "context": pl.List(pl.String),
        },
    )


# --------------------------------------------------------------------------------------------- runs


def cli_command(server: FakeLLMServer, src: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(src), "-o", str(out),
        "--model", MODEL, "--api-base", server.base_url, "--api-key-env", KEY_ENV, *extra,
    ]  # fmt: skip


def run_cli(cmd: list[str], key: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, capture_output=True, text=True, env=child_env(**{KEY_ENV: key}, **env), timeout=timeout, check=False
    )


def dagster_env(server: FakeLLMServer, home: Path, landing: Path, warehouse: Path, key: str, **extra: str) -> dict[str, str]:
    """The code location's FP_* settings for ``dg`` subprocesses, with the key in its own variable."""
    return child_env(
        DAGSTER_HOME=str(home),
        FP_LANDING=str(landing),
        FP_WAREHOUSE=str(warehouse),
        FP_JUDGE_MODEL=MODEL,
        FP_JUDGE_API_BASE=server.base_url,
        FP_JUDGE_API_KEY_ENV=KEY_ENV,
        **{KEY_ENV: key},
        **extra,
    )


#: The assets up to the scored table (the BI tables after it add run time, not coverage).
TO_SCORED = "raw_conversations,extracted_claims,judged_claims,scored_conversations"


def dg_launch(day: str = DAY, assets: str = "group:answer_quality") -> list[str]:
    return [str(Path(sys.executable).parent / "dg"), "launch", "--assets", assets, "--partition", day]


def make_home(path: Path) -> Path:
    """A temporary DAGSTER_HOME with the repository's instance configuration."""
    path.mkdir(parents=True, exist_ok=True)
    text = (REPO / "dagster_home" / "dagster.yaml").read_text(encoding="utf-8")
    (path / "dagster.yaml").write_text(text, encoding="utf-8")
    return path


def comparable(frame: pl.DataFrame, drop: Iterable[str] = RUN_COLUMNS) -> pl.DataFrame:
    return frame.drop([c for c in drop if c in frame.columns]).sort("row_key")


#: The input columns a Dagster day's scored table leaves in raw_conversations (the CLI's scored table has them).
LEFT_IN_RAW = ("context", "messages")


def as_dagster_scores(cli_scored: pl.DataFrame) -> pl.DataFrame:
    """A CLI-scored table as the Dagster day's scored table holds it: without the heavy input columns."""
    return cli_scored.drop([c for c in LEFT_IN_RAW if c in cli_scored.columns])


def kill_group(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """SIGKILL the process group this test started (the process and every child it forked)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen[bytes] | None, what: str, limit: float = 300) -> None:
    """Polls ``condition``; fails if ``proc`` ends first or ``limit`` seconds pass (a hang, not a timing check)."""
    deadline = time.monotonic() + limit
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process ended before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {limit} s")
        time.sleep(0.01)


def step_items(judge: ScriptedJudge, step: str) -> int:
    """Items the fake server was asked about in ``step`` requests so far (every attempt counts)."""
    return sum(len(call.texts) for call in list(judge.calls) if call.step == step)


def step_requests(judge: ScriptedJudge, step: str) -> int:
    return sum(1 for call in list(judge.calls) if call.step == step)


STEPS = ("extract", "verdict")
REFERENCE_ROWS = 600
REFERENCE_KEY = "sk-reference-5e1d0a9c7b3f2468"


@dataclass
class Reference:
    """One uninterrupted, fault-free CLI run over ``REFERENCE_ROWS`` short rows, with every output."""

    src: Path
    scored: pl.DataFrame
    claims: pl.DataFrame
    mastra: list[str]
    items: dict[str, int]  # items each step asks about once, without faults
    store: Path
    store_rows: int


def store_counts(store: Path) -> dict[str, int]:
    """Results per step in a result store, after checking that SQLite finds the file intact."""
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        counts = dict(conn.execute("SELECT step, count(*) FROM results GROUP BY step").fetchall())
    return {step: int(counts.get(step, 0)) for step in STEPS}


# ---------------------------------------------------------------------------------------------- RSS


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def process_tree(pid: int) -> list[int]:
    tree = _children()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(tree.get(p, []))
    return out


def rss_kb(pid: int) -> int:
    """Resident memory of one process in kB (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


@dataclass
class RssSample:
    seconds: float
    progress: int  # a caller-chosen progress counter (e.g. requests the server has answered)
    rss_kb: dict[int, int]  # per process of the tree


@dataclass
class RssSampler:
    """Samples VmRSS of a process and its descendants every ``every`` seconds in a background thread."""

    pid: int
    progress: Callable[[], int]
    every: float = 0.25
    samples: list[RssSample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> RssSampler:
        started = time.monotonic()

        def loop() -> None:
            while not self._stop.is_set():
                pids = process_tree(self.pid)
                sizes = {p: rss_kb(p) for p in pids}
                self.samples.append(RssSample(time.monotonic() - started, self.progress(), sizes))
                self._stop.wait(self.every)

        self._thread = threading.Thread(target=loop, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def peak_mb_per_process(self) -> dict[int, float]:
        peaks: dict[int, int] = {}
        for s in self.samples:
            for p, kb in s.rss_kb.items():
                peaks[p] = max(peaks.get(p, 0), kb)
        return {p: kb / 1024 for p, kb in peaks.items()}

    def series_mb(self, pid: int | None = None) -> Iterator[tuple[float, int, float]]:
        """(seconds, progress, MB) of one process, or of the largest process of each sample."""
        for s in self.samples:
            kb = s.rss_kb.get(pid, 0) if pid is not None else max(s.rss_kb.values(), default=0)
            if kb:
                yield s.seconds, s.progress, kb / 1024
