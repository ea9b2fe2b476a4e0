"""A password inside a setting (issue 40: ``FP_JUDGE_STORE='postgresql://fp:secret@...'``, the recipe of
docs/scaling-out.md) never reaches Dagster's run storage, whose job snapshots its UI shows to every user: the
resource holds the variable's name (``dg.EnvVar``) and each step reads the value itself. A real ``dg launch``
of a day with the offline judge, its store on a real PostgreSQL with password authentication."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.defs import DefsSettings
from faithfulness_pipeline.settings.sensitive import holds_password
from tests.postgres_cluster import PASSWORD, Cluster
from tests.reliability.support import DAY, REPO, TO_SCORED, child_env, dg_launch, make_home, short_rows


def test_a_store_password_is_in_no_file_dagster_writes(postgres: Cluster, tmp_path: Path) -> None:
    tmp = tmp_path
    database = f"runstore_{uuid.uuid4().hex[:12]}"
    postgres.psql(f"CREATE DATABASE {database}")
    landing = tmp / "landing"
    landing.mkdir()
    short_rows(12).write_parquet(landing / "conversations.parquet")
    home = make_home(tmp / "dagster_home")
    warehouse = tmp / "warehouse"
    env = child_env(DAGSTER_HOME=str(home), FP_LANDING=str(landing), FP_WAREHOUSE=str(warehouse),
                    FP_JUDGE_STORE=postgres.url(database=database))  # fmt: skip
    run = subprocess.run(dg_launch(DAY, TO_SCORED), env=env, cwd=REPO, capture_output=True, text=True, timeout=600,
                         check=False)  # fmt: skip
    assert "RUN_SUCCESS" in run.stdout + run.stderr, run.stderr[-3000:]
    # the step did read the store's URL, password and all: the day's results are in the store
    assert int(postgres.psql("SELECT count(*) FROM fp_results", database=database)) > 0
    assert pl.read_parquet(warehouse / "scored_conversations" / f"ds={DAY}" / "data.parquet").height == 12
    assert {"runs.db", "index.db"} <= {p.name for p in home.rglob("*.db")}
    leaked = [str(p) for p in home.rglob("*") if p.is_file() and any(PASSWORD in text for text in _texts(p))]
    assert leaked == [] and PASSWORD not in run.stdout + run.stderr


def _texts(path: Path) -> Iterator[str]:
    """A file's bytes as text, and for a SQLite file every value of every table, zlib blobs inflated: Dagster
    keeps its job snapshots compressed."""
    raw = path.read_bytes()
    yield raw.decode("utf-8", errors="ignore")
    if not raw.startswith(b"SQLite format 3\0"):
        return
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):  # names come from the file itself
                for value in row:
                    if isinstance(value, str):
                        yield value
                    elif isinstance(value, bytes):
                        with contextlib.suppress(zlib.error):
                            value = zlib.decompress(value)
                        yield value.decode("utf-8", errors="ignore")


@pytest.mark.parametrize(
    ("text", "secret"),
    [("postgresql://fp:pw@db/fp", True), ("postgresql://fp@db/fp", False), ("host=db dbname=fp password=pw", True),
     ("postgresql:///fp?host=/run&password=pw", True), ("/data/store.sqlite", False), ("s3://bucket/warehouse", False),
     ("http://[::1", False)],
)  # fmt: skip
def test_which_values_hold_a_password(text: str, secret: bool) -> None:
    assert holds_password(text) is secret


def test_the_resource_holds_the_variable_not_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "postgresql://fp:s3cret-pw@db.internal:5432/fp"
    monkeypatch.setenv("FP_JUDGE_STORE", url)
    monkeypatch.setenv("FP_JUDGE_TIMEOUT_S", "30")
    settings = DefsSettings.from_env()
    config = repr(settings.judge)
    assert "s3cret-pw" not in config and "FP_JUDGE_STORE" in config
    assert settings.judge.timeout_s == 30  # values without a password are given as they are
    # a mapping of one's own is no environment a step process could read the variable from: taken as given
    assert DefsSettings.from_env({"FP_JUDGE_STORE": url.replace("s3cret", "other")}).judge.store == url.replace(
        "s3cret", "other")
