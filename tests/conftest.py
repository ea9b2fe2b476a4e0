"""Test-wide settings: litellm stays offline and quiet (no price-list fetch, no tokenizer download); one
PostgreSQL cluster and one S3 server (moto, ``tests/s3_server.py``) per worker for the tests that need a
real server."""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.postgres_cluster import Cluster, missing_reason, postgres_cluster
from tests.s3_server import FOREIGN_AWS, S3Server, s3_env
from tests.s3_server import missing_reason as s3_missing_reason
from tests.s3_server import s3_server as running_s3_server

for _name, _value in {
    "LITELLM_OFFLINE_MODE": "true",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOG": "ERROR",
    "HF_HUB_OFFLINE": "1",
    "DAGSTER_TELEMETRY_DISABLED": "1",
}.items():
    os.environ.setdefault(_name, _value)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Cluster]:
    """A throwaway PostgreSQL cluster for the tests of this worker process (skipped, saying why, where
    PostgreSQL cannot run); each test makes its own database in it."""
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    with postgres_cluster() as running:
        yield running


_DATABASES = itertools.count()


@pytest.fixture(params=["sqlite", "postgresql"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], str]:
    """Makes fresh, empty result stores of one backend, named as a user names them (a file path, or a
    postgresql:// URL to a new database of the worker's cluster): a test asking for it runs once per backend."""
    if request.param == "sqlite":
        return lambda name: str(tmp_path / f"{name}.sqlite")
    cluster: Cluster = request.getfixturevalue("postgres")

    def make(name: str) -> str:
        database = f"store_{next(_DATABASES)}"
        cluster.psql(f"CREATE DATABASE {database}")
        return cluster.url(database=database)

    return make


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server on 127.0.0.1 for this worker process (skipped, saying why, without moto)."""
    reason = s3_missing_reason()
    if reason is not None:
        pytest.skip(reason)
    # werkzeug logs every request of the server at INFO: the tests' output stays readable without it.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    with running_s3_server() as server:
        yield server


@dataclass
class S3Bucket:
    """A fresh bucket on the test's S3 server; the environment of the test (and of its subprocesses, which
    inherit it) points every S3 client at the server."""

    server: S3Server
    name: str
    env: dict[str, str]

    def uri(self, key: str = "") -> str:
        return f"s3://{self.name}/{key}" if key else f"s3://{self.name}"

    def objects(self) -> list[str]:
        """The keys of every object in the bucket (``S3Server.keys``)."""
        return self.server.keys(self.name)


@pytest.fixture
def s3(s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> S3Bucket:
    """A new, empty bucket, and AWS_* variables (endpoint, dummy keys, region) for this test only."""
    for name in FOREIGN_AWS:
        monkeypatch.delenv(name, raising=False)
    env = s3_env(s3_server, tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return S3Bucket(s3_server, s3_server.new_bucket(), env)


#: Test files that take minutes, longest first (from the CI's ``--durations``). Workers take whole files
#: (``--dist loadfile``) in collection order, so these go first. xdist's default order puts the files with
#: the most tests first, which handed these out last: the longest then kept one worker busy for minutes
#: after the other was done.
_LONGEST_FIRST = (
    "tests/reliability/test_two_machines.py",
    "tests/reliability/test_crash_resume.py",
    "tests/selfhosted/test_llama_server.py",
    "tests/cli/test_llm_cli.py",
    "tests/reliability/test_fault_soak.py",
    "tests/defs/test_warehouse_s3.py",
    "tests/defs/test_dev_server.py",
    "tests/defs/test_demo.py",
    "tests/reliability/test_concurrent_store.py",
    "tests/reliability/test_secrets.py",
    "tests/reliability/test_batch_resume.py",
    "tests/defs/test_materialize.py",
    "tests/defs/test_cli.py",
    "tests/reliability/test_locked_store.py",
    # Few tests each, so xdist's count order handed them out last, where the longest (the Celery ones, minutes
    # each) can leave one worker busy alone at the end (a clean-clone run spent its last 8 minutes on ~70 tests).
    "tests/defs/test_celery_faults.py",
    "tests/defs/test_celery.py",
    "tests/review/test_phoenix_labels.py",
    "tests/traces/test_phoenix.py",
    "tests/traces/test_write_back_faults.py",
    "tests/traces/test_span_staging_crash.py",
    "tests/review/test_browser.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of :data:`_LONGEST_FIRST` first, in that order, then the rest with the most tests first;
    the order within a file is kept."""
    rank = {path: k for k, path in enumerate(_LONGEST_FIRST)}
    counts: dict[str, int] = {}
    for item in items:
        counts[item.nodeid.split("::")[0]] = counts.get(item.nodeid.split("::")[0], 0) + 1

    def key(item: pytest.Item) -> tuple[int, int]:
        path = item.nodeid.split("::")[0]
        return (rank[path], 0) if path in rank else (len(rank), -counts[path])

    items.sort(key=key)
