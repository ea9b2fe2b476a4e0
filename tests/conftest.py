"""Test-wide settings: litellm stays offline and quiet (no price-list fetch, no tokenizer download); one
PostgreSQL cluster per worker for the tests that need a real server."""

from __future__ import annotations

import os
from collections.abc import Iterator

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
