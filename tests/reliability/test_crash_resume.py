"""Crash and resume: SIGKILL the CLI during extraction, during verdicts and while it writes its output,
and a ``dg launch`` run during its LLM step. No partial output is ever visible, the result store stays
intact, a crash loses at most the requests in flight, the re-run pays exactly for what the store lacks
and gives the table of an uninterrupted run.

The phases are hit deterministically by watching the fake server's scripted judge (which step each
request is for) and the output folder, with a server latency that makes each phase last long enough.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.testing.fakellm import FakeLLMServer, Latency
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.reliability.support import (
    DAY,
    KEY_ENV,
    REPO,
    STEPS,
    TO_SCORED,
    Reference,
    as_dagster_scores,
    child_env,
    cli_command,
    comparable,
    dagster_env,
    dg_launch,
    kill_group,
    make_home,
    run_cli,
    short_rows,
    step_items,
    store_counts,
    wait_for,
)

KEY = "sk-crash-5e1d0a9c7b3f2468"
CONCURRENCY = 2
MAX_ITEMS_PER_REQUEST = 32  # the judge's default pack limit: what one request in flight can hold


def assert_nothing_visible(folder: Path, outputs: list[str]) -> None:
    """No output exists; what the killed run left is hidden temporary files that no glob of outputs matches."""
    for name in outputs:
        assert not (folder / name).exists(), name
    for path in folder.iterdir():
        if path.name.startswith(tuple(f".{name}." for name in outputs)):
            assert path.name.endswith(".tmp"), path.name


def _phase_reached(phase: str, judge: ScriptedJudge, folder: Path) -> bool:
    if phase in STEPS:
        return step_items(judge, phase) >= 3 * MAX_ITEMS_PER_REQUEST
    # writing: the first chunks are in the temporary output file, later chunks are still being judged
    written = any(p.stat().st_size > 0 for p in folder.glob(".out.parquet.*.tmp"))
    return written and step_items(judge, "verdict") > 0


def _wait_until_quiet(server: FakeLLMServer, judge: ScriptedJudge, calm_s: float = 0.5) -> None:
    """Returns once the server has no request open and no new one has arrived for ``calm_s`` seconds."""
    seen, since = -1, time.monotonic()
    while True:
        now = (len(judge.calls), server.stats().open_requests)
        if now[0] != seen or now[1]:
            seen, since = now[0], time.monotonic()
        elif time.monotonic() - since >= calm_s:
            return
        time.sleep(0.02)


def _start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _finish_paying_only_for_the_rest(srv: FakeLLMServer, judge: ScriptedJudge, base: list[str],
                                     reference: Reference, kept: dict[str, int], out: Path) -> None:
    """A last run at full speed asks exactly for the results the store lacked, each once, and gives the
    uninterrupted run's table."""
    srv.set_latency(Latency())
    judge.calls.clear()
    finished = run_cli(base, KEY)
    assert finished.returncode == 0, finished.stderr
    for step in STEPS:
        assert step_items(judge, step) == reference.items[step] - kept[step], (step, kept)
    assert comparable(pl.read_parquet(out)).equals(comparable(reference.scored))


def test_sigkill_in_every_phase_leaves_no_output_and_each_rerun_pays_only_for_what_is_missing(
    reference: Reference, tmp_path: Path
) -> None:
    """One table, killed three times in a row (each re-run resumes the last), then finished:
    1. during extraction, 2. during verdicts, 3. while the output file is being written."""
    store = tmp_path / "store.sqlite"
    outputs = ["out.parquet", "claims.parquet", "mastra.jsonl"]
    judge = ScriptedJudge()
    with FakeLLMServer(judge, latency=Latency(base_s=0.1)) as srv:
        base = cli_command(
            srv, reference.src, tmp_path / "out.parquet", "--claims-out", str(tmp_path / "claims.parquet"),
            "--mastra-out", str(tmp_path / "mastra.jsonl"), "--store", str(store),
            "--max-concurrency", str(CONCURRENCY), "--quiet",
        )  # fmt: skip
        env = child_env(**{KEY_ENV: KEY})
        kept = dict.fromkeys(STEPS, 0)
        # Chunks of 60 rows make the output grow chunk by chunk, so "while writing" is a long phase.
        for phase, extra in (("extract", []), ("verdict", []), ("write", ["--chunk-rows", "60"])):
            before = dict(kept)
            judge.calls.clear()
            proc = _start([*base, *extra], env)
            try:
                wait_for(partial(_phase_reached, phase, judge, tmp_path), proc, f"the {phase} phase")
            finally:
                kill_group(proc)
            # A request the killed process wrote just before it died may still be unread in the server's
            # socket: it belongs to this run, so wait until the server has seen and dropped every one.
            _wait_until_quiet(srv, judge)
            asked = {step: step_items(judge, step) for step in STEPS}
            assert_nothing_visible(tmp_path, outputs)
            kept = store_counts(store)
            for step in STEPS:
                # asked only for what the store lacked; lost at most what was in flight at the kill
                assert asked[step] <= reference.items[step] - before[step], (phase, step, asked, before)
                assert 0 <= before[step] + asked[step] - kept[step] <= CONCURRENCY * MAX_ITEMS_PER_REQUEST, (
                    phase, step, asked, before, kept,
                )  # fmt: skip
            # the kill landed in the phase it was meant for
            if phase == "extract":
                assert asked["verdict"] == 0 and kept["extract"] < reference.items["extract"], (asked, kept)
            else:
                assert kept["verdict"] < reference.items["verdict"], (phase, asked, kept)
            print(f"killed during {phase}: asked {asked}, store now {kept}")

        _finish_paying_only_for_the_rest(srv, judge, base, reference, kept, tmp_path / "out.parquet")
    claims = pl.read_parquet(tmp_path / "claims.parquet").drop("scored_at").sort("row_key", "claim_index")
    assert claims.equals(reference.claims.drop("scored_at").sort("row_key", "claim_index"))
    assert sorted((tmp_path / "mastra.jsonl").read_text(encoding="utf-8").splitlines()) == reference.mastra


@pytest.mark.parametrize(("sig", "status", "word"), [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")])
@pytest.mark.parametrize("phase", ["verdict", "write"])
def test_sigterm_is_handled_like_sigint(
    sig: signal.Signals, status: int, word: str, phase: str, reference: Reference, tmp_path: Path
) -> None:
    """A signal to the CLI alone (not its group: a service manager's stop) during verdicts or while the
    outputs are written: one line, its exit status, no output and no temporary file left, the store intact;
    the re-run asks only for what the store lacks and gives the uninterrupted run's table."""
    store = tmp_path / "store.sqlite"
    judge = ScriptedJudge()
    with FakeLLMServer(judge, latency=Latency(base_s=0.1)) as srv:
        base = cli_command(
            srv, reference.src, tmp_path / "out.parquet", "--claims-out", str(tmp_path / "claims.parquet"),
            "--mastra-out", str(tmp_path / "mastra.jsonl"), "--store", str(store),
            "--max-concurrency", str(CONCURRENCY), "--quiet", "--chunk-rows", "60",
        )  # fmt: skip
        proc = subprocess.Popen(base, env=child_env(**{KEY_ENV: KEY}), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
        try:
            wait_for(partial(_phase_reached, phase, judge, tmp_path), proc, f"the {phase} phase")  # type: ignore[arg-type]
            proc.send_signal(sig)
            _, stderr = proc.communicate(timeout=120)
        finally:
            kill_group(proc)
        assert proc.returncode == status, stderr
        assert stderr.strip().splitlines() == [f"{word}: nothing was written (stored results are kept for the next run)"]
        left = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("store.sqlite"))
        assert left == [], left  # no output, no temporary file
        _wait_until_quiet(srv, judge)
        kept = store_counts(store)  # checks the file's integrity too
        assert 0 < sum(kept.values()) < sum(reference.items.values())
        _finish_paying_only_for_the_rest(srv, judge, base, reference, kept, tmp_path / "out.parquet")


def test_a_rerun_removes_what_a_killed_run_left_behind(tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    short_rows(3000).write_parquet(src)
    # The offline judge (no model, no server) with one-row chunks: a long write phase, cheaply.
    cmd = [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(src), "-o", str(tmp_path / "out.parquet"),
           "--quiet"]  # fmt: skip
    proc = _start([*cmd, "--chunk-rows", "1"], child_env())
    try:
        wait_for(lambda: any(p.stat().st_size > 0 for p in tmp_path.glob(".out.parquet.*.tmp")), proc, "a write")
    finally:
        kill_group(proc)
    assert_nothing_visible(tmp_path, ["out.parquet"])
    assert subprocess.run(cmd, env=child_env(), capture_output=True, check=False).returncode == 0
    assert not list(tmp_path.glob(".out.parquet.*")), sorted(p.name for p in tmp_path.iterdir())


# ------------------------------------------------------------------------------------------ Dagster


def _warehouse_files(warehouse: Path) -> list[str]:
    return sorted(str(p.relative_to(warehouse)) for p in warehouse.rglob("*") if p.is_file())


def test_dg_launch_killed_during_verdicts_resumes_from_the_store(reference: Reference, tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "conversations.parquet").write_bytes(reference.src.read_bytes())
    home = make_home(tmp_path / "dagster_home")
    warehouse = tmp_path / "warehouse"
    judge = ScriptedJudge()
    with FakeLLMServer(judge) as srv:
        env = dagster_env(srv, home, landing, warehouse, KEY, FP_JUDGE_MAX_CONCURRENCY=str(CONCURRENCY))
        # extraction at full speed, then slow verdicts: the kill lands inside judged_claims
        proc = subprocess.Popen(dg_launch(DAY, TO_SCORED), env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        try:
            wait_for(lambda: step_items(judge, "extract") >= reference.items["extract"], proc, "the end of extraction")
            srv.set_latency(Latency(base_s=0.15))
            wait_for(lambda: step_items(judge, "verdict") >= 3 * MAX_ITEMS_PER_REQUEST, proc, "verdict requests")
        finally:
            kill_group(proc)
        asked = {step: step_items(judge, step) for step in STEPS}
        assert asked["verdict"] < reference.items["verdict"], asked
        files = _warehouse_files(warehouse)
        day = f"ds={DAY}"
        assert f"raw_conversations/{day}/data.parquet" in files
        # nothing of the killed step (claims and verdicts are one), nor of anything after it, is visible as a
        # table: what it finished is in the result store
        for table in ("extracted_claims", "judged_claims", "scored_conversations", "claim_table",
                      "daily_answer_quality"):
            assert not [f for f in files if f.startswith(f"{table}/") and not Path(f).name.startswith(".")], files
        for name in files:  # every visible table file is complete Parquet
            if name.endswith(".parquet") and not Path(name).name.startswith("."):
                pl.read_parquet(warehouse / name)
        kept = store_counts(warehouse / "_judge_store.sqlite")
        assert kept["extract"] == reference.items["extract"]
        assert 0 <= asked["verdict"] - kept["verdict"] <= CONCURRENCY * MAX_ITEMS_PER_REQUEST, (asked, kept)

        srv.set_latency(Latency())
        judge.calls.clear()
        # the killed run keeps one of the pool's two slots (see the report): one is enough for the re-run
        rerun = subprocess.run(dg_launch(DAY, TO_SCORED), env=env, cwd=REPO, capture_output=True, text=True, timeout=600,
                               check=False)  # fmt: skip
        assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert step_items(judge, "extract") == 0
    assert step_items(judge, "verdict") == reference.items["verdict"] - kept["verdict"]
    scored = pl.read_parquet(warehouse / "scored_conversations" / day / "data.parquet")
    expected = as_dagster_scores(reference.scored)
    assert comparable(scored.select(expected.columns)).equals(comparable(expected))
