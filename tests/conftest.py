"""Test-wide settings: litellm stays offline and quiet (no price-list fetch, no tokenizer download); one
PostgreSQL cluster per worker for the tests that need a real server."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.postgres_cluster import Cluster, missing_reason, postgres_cluster

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
