"""Fixtures of the reliability suite: a temporary Dagster instance, and one fault-free reference run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.reliability.support import (
    REFERENCE_KEY,
    REFERENCE_ROWS,
    STEPS,
    Reference,
    cli_command,
    make_home,
    run_cli,
    short_rows,
    step_items,
    store_counts,
)


@pytest.fixture
def instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dg.DagsterInstance]:
    monkeypatch.setenv("DAGSTER_HOME", str(make_home(tmp_path / "dagster_home")))
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """What an uninterrupted run gives and asks for: the crash and shared-store tests compare against it."""
    root = tmp_path_factory.mktemp("reference")
    src = root / "in.parquet"
    short_rows(REFERENCE_ROWS).write_parquet(src)
    judge = ScriptedJudge()
    with FakeLLMServer(judge) as server:
        done = run_cli(
            cli_command(server, src, root / "out.parquet", "--claims-out", str(root / "claims.parquet"),
                        "--mastra-out", str(root / "mastra.jsonl"), "--store", str(root / "store.sqlite"), "--quiet"),
            REFERENCE_KEY,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return Reference(
        src=src,
        scored=pl.read_parquet(root / "out.parquet"),
        claims=pl.read_parquet(root / "claims.parquet"),
        mastra=sorted((root / "mastra.jsonl").read_text(encoding="utf-8").splitlines()),
        items={step: step_items(judge, step) for step in STEPS},
        store=root / "store.sqlite",
        store_rows=sum(store_counts(root / "store.sqlite").values()),
    )
