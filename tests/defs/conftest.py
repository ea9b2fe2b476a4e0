"""Fixtures of the Dagster tests: a temporary instance, landing folder and warehouse for every test.

DAGSTER_HOME always points at a temporary folder holding a copy of the repository's dagster.yaml, so the
tests exercise the real instance configuration and never write into the repository's dagster_home.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import pytest

from faithfulness_pipeline.defs import DefsSettings, build_defs
from faithfulness_pipeline.defs.resources import LabelsResource, LandingResource, WarehouseResource
from tests.conftest import S3Bucket
from tests.defs.celery_world import World, broker_fixture, world_fixture
from tests.postgres_cluster import Cluster
from tests.redis_server import RedisServer

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_data"
DAYS = ("2026-11-24", "2026-11-25", "2026-11-26")
# What a run should materialise, written out here rather than read from the definitions under test.
TABLES = (
    "raw_conversations",
    "extracted_claims",
    "judged_claims",
    "scored_conversations",
    "claim_table",
    "daily_answer_quality",
    "daily_model_comparison",
    "daily_corrected_quality",
    "review_queue",
)  # one Parquet table per day each
ASSETS = {*TABLES, "answer_quality_duckdb", "answer_quality_report"}
LABEL_ASSETS = {"answer_labels"}  # unpartitioned, job read_labels
CALIBRATION_ASSETS = {"labelled_conversations", "judge_calibration"}  # unpartitioned, job calibrate_judge


def sample_ids() -> dict[str, set[str]]:
    """conversation ids of the sample data per UTC day."""
    out: dict[str, set[str]] = {}
    for path in sorted(SAMPLE.rglob("*.parquet")):
        frame = pl.read_parquet(path).select("conversation_id", pl.col("created_at").dt.date().cast(pl.String))
        for cid, day in frame.iter_rows():
            out.setdefault(day, set()).add(cid)
    return out


def instance_yaml(pool_limit: int | None = None) -> str:
    text = (REPO / "dagster_home" / "dagster.yaml").read_text(encoding="utf-8")
    if pool_limit is not None:
        assert "default_limit: 2" in text
        text = text.replace("default_limit: 2", f"default_limit: {pool_limit}")
    return text


def make_home(path: Path, pool_limit: int | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "dagster.yaml").write_text(instance_yaml(pool_limit), encoding="utf-8")
    return path


@pytest.fixture
def dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = make_home(tmp_path / "dagster_home")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


@pytest.fixture
def landing(tmp_path: Path) -> Path:
    target = tmp_path / "landing"
    shutil.copytree(SAMPLE, target, ignore=shutil.ignore_patterns("*.py"))
    return target


@dataclass
class Lake:
    """One test's world: settings pointing at its landing folder and warehouse, and the defs built from them."""

    landing: Path
    warehouse: Path
    defs: dg.Definitions

    def read(self, table: str, day: str) -> pl.DataFrame:
        return pl.read_parquet(self.warehouse / table / f"ds={day}" / "data.parquet")

    def materialize(
        self,
        day: str,
        instance: dg.DagsterInstance,
        resources: dict[str, object] | None = None,
        selection: dg.AssetSelection | None = None,
        tags: dict[str, str] | None = None,
    ) -> dg.ExecuteInProcessResult:
        everything: Sequence[Any] = [*(self.defs.assets or []), *(self.defs.asset_checks or [])]
        return dg.materialize(
            everything,
            partition_key=None if tags else day,
            tags=tags,
            instance=instance,
            resources={**(self.defs.resources or {}), **(resources or {})},
            # the daily graph; the unpartitioned calibration assets have their own job and tests
            selection=selection or dg.AssetSelection.groups("answer_quality"),
            raise_on_error=False,
        )


def make_lake(landing: Path, warehouse: Path, labels: LabelsResource | None = None, **landing_fields: object) -> Lake:
    settings = DefsSettings(
        landing=LandingResource(path=str(landing), **landing_fields),  # type: ignore[arg-type]
        warehouse=WarehouseResource(root=str(warehouse)),
        labels=labels or LabelsResource(),
    )
    return Lake(landing, warehouse, build_defs(settings))


@pytest.fixture
def lake(landing: Path, tmp_path: Path) -> Lake:
    return make_lake(landing, tmp_path / "warehouse")


@pytest.fixture
def instance(dagster_home: Path) -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:
        yield inst


@dataclass
class Built:
    """Every sample day materialised once: the lake, each day's run result, and the (still open) instance."""

    lake: Lake
    results: dict[str, dg.ExecuteInProcessResult]
    instance: dg.DagsterInstance


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """All assets and checks of every sample day, materialised once per session. Tests read it or copy it."""
    root = tmp_path_factory.mktemp("built")
    landing = root / "landing"
    shutil.copytree(SAMPLE, landing, ignore=shutil.ignore_patterns("*.py"))
    lake = make_lake(landing, root / "warehouse")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAGSTER_HOME", str(make_home(root / "home")))
        with dg.instance_for_test() as instance:
            yield Built(lake, {day: lake.materialize(day, instance) for day in DAYS}, instance)


def copy_lake(source: Lake, tmp_path: Path, **landing_fields: object) -> Lake:
    """A private copy of a materialised warehouse, to break on purpose."""
    warehouse = tmp_path / "warehouse"
    shutil.copytree(source.warehouse, warehouse)
    return make_lake(source.landing, warehouse, **landing_fields)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def subprocess_env(home: Path, warehouse: Path, landing: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FP_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(home),
        DAGSTER_TELEMETRY_DISABLED="1",
        FP_WAREHOUSE=str(warehouse),
        FP_LANDING=str(landing),
        PYTHONUNBUFFERED="1",
    )
    return env


# The Celery tests' world (tests/defs/celery_world.py): a broker and a fleet that shares it.
@pytest.fixture
def broker() -> Iterator[RedisServer]:
    yield from broker_fixture()


@pytest.fixture
def world(postgres: Cluster, s3: S3Bucket, broker: RedisServer, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:  # fmt: skip
    yield from world_fixture(postgres, s3, broker, tmp_path, monkeypatch)
