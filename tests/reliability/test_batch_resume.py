"""Batch mode killed and resumed: SIGKILL the CLI while it creates a batch, while it waits for the
extraction batch and while it waits for the verdict batch; each re-run finds the batches in the store
and waits for them, so the server creates exactly one batch per step over all the runs, and the final
table equals an uninterrupted run's. A batch whose id was lost (the run died between the create call and
recording it) is found again by its tag, in a SQLite and in a PostgreSQL store."""

from __future__ import annotations

import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import psycopg
import pytest

from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.judging.llm.batch.judge import BatchFailed
from faithfulness_pipeline.judging.store.postgres import is_postgres_url
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.fakellm.faults import BatchFaults, BatchTiming
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.judging.test_batch_mode import _frame, _score
from tests.reliability.support import (
    KEY_ENV,
    child_env,
    cli_command,
    comparable,
    kill_group,
    run_cli,
    short_rows,
    wait_for,
)

KEY = "sk-batch-resume-91c3e7"
FAST = BatchTiming(validating_s=0.01, per_line_s=0.001, finalizing_s=0.01)
#: Long enough for a kill to land while the run waits for its batch.
SLOW = BatchTiming(validating_s=3.0, per_line_s=0.001, finalizing_s=0.01)
USAGE = ("llm_calls", "prompt_tokens", "completion_tokens", "cost_usd")


def _sql(store: str, statement: str) -> list[tuple[Any, ...]]:
    """``statement`` run on the store's own database (a SQLite file or a PostgreSQL URL), its rows if any."""
    if is_postgres_url(store):
        with psycopg.connect(store, autocommit=True) as conn:
            cursor = conn.execute(statement)
            return cursor.fetchall() if cursor.description else []
    with sqlite3.connect(store, timeout=5) as conn:
        return conn.execute(statement).fetchall()


def _states(store: str) -> list[tuple[str, str]]:
    if not is_postgres_url(store) and not Path(store).exists():
        return []
    try:
        return _sql(store, "SELECT step, state FROM batch_jobs ORDER BY created_at")
    except (sqlite3.OperationalError, psycopg.errors.UndefinedTable):  # the table is not there yet
        return []


def _start(cmd: list[str]) -> subprocess.Popen[bytes]:
    env = child_env(**{KEY_ENV: KEY})
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def test_sigkill_while_creating_and_while_waiting_never_pays_twice(tmp_path: Path) -> None:
    """With a SQLite store (the ledger's PostgreSQL backend runs the same statements; its records outliving
    a run are tested below and in tests/judging/test_batch_mode.py)."""
    src = tmp_path / "in.parquet"
    short_rows(120).write_parquet(src)
    store = str(tmp_path / "store.sqlite")
    with FakeLLMServer(ScriptedJudge(), batch_timing=FAST) as server:
        reference = run_cli(cli_command(server, src, tmp_path / "ref.parquet", "--batch", "--store",
                                        str(tmp_path / "ref.sqlite"), "--batch-poll", "0.05", "--quiet"), KEY)
        assert reference.returncode == 0, reference.stderr
        server.reset_stats()
        base = cli_command(server, src, tmp_path / "out.parquet", "--batch", "--store", store,
                           "--batch-poll", "0.05", "--quiet")

        # 1. while creating: every create is answered 429, the run is recorded as "creating"
        server.set_batch_faults(BatchFaults(create_429=10_000, retry_after_s=0.5))
        proc = _start(base)
        try:
            wait_for(lambda: server.stats().batch_create_429 >= 2, proc, "a refused create")
            assert _states(store) == [("extract", "creating")]
        finally:
            kill_group(proc)
        assert server.stats().batches_created == 0

        # 2. while waiting for the extraction batch (created by the resumed run: nothing was created before)
        server.set_batch_faults(BatchFaults())
        server.set_batch_timing(SLOW)
        proc = _start(base)
        try:
            wait_for(lambda: server.stats().batches_created == 1, proc, "the extraction batch")
        finally:
            kill_group(proc)

        # 3. while waiting for the verdict batch
        proc = _start(base)
        try:
            wait_for(lambda: server.stats().batches_created == 2, proc, "the verdict batch")
            assert ("extract", "ingested") in _states(store)
        finally:
            kill_group(proc)
        assert not (tmp_path / "out.parquet").exists()

        server.set_batch_timing(FAST)
        finished = run_cli(base, KEY)
        assert finished.returncode == 0, finished.stderr
        assert server.stats().batches_created == 2, "a batch was submitted twice"
        assert server.stats().requests == 0
    drop = ("scored_at", "scoring_run_id", "result_source", *USAGE)
    out = pl.read_parquet(tmp_path / "out.parquet")
    assert comparable(out).equals(comparable(pl.read_parquet(tmp_path / "ref.parquet")))
    assert comparable(out, drop).height == 120 and (out.get_column("status") == "ok").all()


def test_a_batch_whose_id_was_lost_is_found_by_its_tag(
    new_store: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run died after the provider created the batch but before its id was recorded: the batch
    exists, the store knows only its tag. The next run finds it by the tag instead of creating another."""
    monkeypatch.setenv(KEY_ENV, KEY)
    store = new_store("s")
    frame = _frame(12)
    with FakeLLMServer(ScriptedJudge(), batch_timing=SLOW) as server:
        settings = JudgeSettings(model="openai/gpt-4o-mini", api_base=server.base_url, api_key_env=KEY_ENV,
                                 mode="batch", store=store, batch_poll_s=0.05, batch_max_wait_s=0.2,
                                 max_items_per_pack=4)
        with pytest.raises(BatchFailed, match="still running"):
            _score(frame, make_judge(settings))
        assert server.stats().batches_created == 1
        _sql(store, "UPDATE batch_jobs SET batch_id = NULL, state = 'creating'")
        server.set_batch_timing(FAST)
        scored = _score(frame, make_judge(settings.model_copy(update={"batch_max_wait_s": 600.0})))
        assert server.stats().batches_created == 2  # the extraction batch found again, the verdict batch new
    assert (scored.get_column("status") == "ok").all()
