"""The landing read from a table: a Delta table (deltalake), an Iceberg table in a SQLite SQL catalog
(pyiceberg) and a PostgreSQL table and query (the worker's throwaway cluster). A day of the answer_quality
group is materialised from each with real ``dagster.materialize`` runs: the rows of that day, and only those,
arrive (the day's bounds are a range on the timestamp column, so rows a second either side stay out)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import polars as pl
import psycopg
import pytest
from deltalake import write_deltalake
from pyiceberg.catalog.sql import SqlCatalog

from faithfulness_pipeline.defs import DefsSettings, build_defs
from faithfulness_pipeline.defs.resources import LabelsResource, LandingResource, ScoringResource, WarehouseResource
from tests.defs.conftest import Lake
from tests.postgres_cluster import PASSWORD, Cluster
from tests.reliability.test_bad_landing_files import _failure

DAY = "2026-11-25"
DAILY = dg.AssetSelection.groups("answer_quality")
_DATABASES = itertools.count()


def _at(day: int, hour: int, minute: int = 0, second: int = 0) -> datetime:
    return datetime(2026, 11, day, hour, minute, second, tzinfo=UTC)


#: The landing table: three answers of DAY in English, Chinese and Korean, and a row a second either side of it.
ROWS = pl.DataFrame({
    "conversation_id": ["en-24", "en-25", "zh-25", "ko-25", "zh-26"],
    "created_at": [_at(24, 23, 59, 59), _at(25, 0), _at(25, 12, 30), _at(25, 23, 59, 59), _at(26, 0)],
    "model": ["gpt-4o-mini"] * 5,
    "language": ["en", "en", "zh", "ko", "zh"],
    "input": ["How tall?", "How tall is the Eiffel Tower?", "埃菲尔铁塔在哪里？", "에펠탑은 어디에 있나요?", "多高？"],
    "output": ["It is 300 metres.", "The Eiffel Tower is 330 metres tall.", "埃菲尔铁塔位于柏林。",
               "에펠탑은 파리에 있습니다.", "它高330米。"],
    "context": [["The Eiffel Tower is 330 metres tall."], ["The Eiffel Tower is 330 metres tall."],
                ["埃菲尔铁塔位于巴黎。"], ["에펠탑은 파리에 있습니다."], ["埃菲尔铁塔高330米。"]],
})
OF_DAY = {"en-25", "zh-25", "ko-25"}


@dataclass(frozen=True)
class Landing:
    """A landing table and the landing resource's fields that read it."""

    fields: dict[str, str]


def delta_landing(tmp_path: Path) -> Landing:
    uri = tmp_path / "landing_delta"
    for day in (24, 25, 26):  # a commit (a file) per day: the day's filter leaves the others' files unopened
        part = ROWS.filter(pl.col("created_at").dt.day() == day)
        write_deltalake(str(uri), part.to_arrow(), mode="append")
    return Landing({"path": str(uri)})


def iceberg_landing(tmp_path: Path) -> Landing:
    catalog_uri = f"sqlite:///{tmp_path / 'landing_catalog.sqlite'}"
    catalog = SqlCatalog("faithfulness", uri=catalog_uri, warehouse=(tmp_path / "iceberg").as_uri())
    catalog.create_namespace("app_logs")
    table = catalog.create_table(("app_logs", "conversations"), schema=ROWS.to_arrow().schema)
    for day in (24, 25, 26):
        table.append(ROWS.filter(pl.col("created_at").dt.day() == day).to_arrow())
    return Landing({"path": "iceberg://app_logs.conversations", "iceberg_catalog": catalog_uri})


def _postgres_database(cluster: Cluster) -> str:
    name = f"landing_{next(_DATABASES)}"
    cluster.psql(f"CREATE DATABASE {name}")
    url = cluster.url(database=name)
    with psycopg.connect(url) as conn:
        conn.execute("CREATE SCHEMA app; CREATE TABLE app.conversations (conversation_id text, created_at "
                     "timestamptz, model text, language text, input text, output text, context text[])")
        with conn.cursor() as cursor:
            cursor.executemany("INSERT INTO app.conversations VALUES (%s, %s, %s, %s, %s, %s, %s)", ROWS.rows())
    return url


def postgres_table(cluster: Cluster) -> Landing:
    return Landing({"path": _postgres_database(cluster), "query": "app.conversations"})


def postgres_query(cluster: Cluster) -> Landing:
    # A view of the team's own: renamed columns, and rows filtered by something else than the day.
    query = ("SELECT conversation_id AS id, created_at AS logged_at, model, language, input, output, context "
             "FROM app.conversations WHERE language <> 'fr'")
    return Landing({"path": _postgres_database(cluster), "query": query, "timestamp_column": "logged_at"})


def _lake(landing: Landing, tmp_path: Path) -> Lake:
    settings = DefsSettings(landing=LandingResource(**landing.fields),  # type: ignore[arg-type]
                            warehouse=WarehouseResource(root=str(tmp_path / "warehouse")), labels=LabelsResource())
    return Lake(tmp_path, tmp_path / "warehouse", build_defs(settings))


def _check_day(result: dg.ExecuteInProcessResult, lake: Lake, kind: str, id_column: str = "conversation_id") -> None:
    assert result.success, _failure(result)
    assert {e.check_name for e in result.get_asset_check_evaluations() if not e.passed} == {"llm_judge_used"}
    raw = lake.read("raw_conversations", DAY)
    assert set(raw.get_column(id_column)) == OF_DAY  # not a row of the day before or after
    scored = lake.read("scored_conversations", DAY)
    assert set(scored.get_column(id_column)) == OF_DAY
    outputs = dict(zip(scored.get_column(id_column), scored.get_column("output"), strict=True))
    assert outputs["zh-25"] == "埃菲尔铁塔位于柏林。" and outputs["ko-25"] == "에펠탑은 파리에 있습니다."
    assert scored.get_column("status").unique().to_list() == ["ok"]
    meta = next(e.materialization.metadata for e in result.get_asset_materialization_events()
                if e.asset_key == dg.AssetKey("raw_conversations"))
    assert meta["landing_kind"].value == kind
    assert PASSWORD not in str({k: v.value for k, v in meta.items()})


@pytest.mark.parametrize("make", [delta_landing, iceberg_landing], ids=["delta", "iceberg"])
def test_a_day_of_a_lakehouse_landing_table_is_scored(
    make: Callable[[Path], Landing], tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    lake = _lake(make(tmp_path), tmp_path)
    kind = "delta" if make is delta_landing else "iceberg"
    _check_day(lake.materialize(DAY, instance, selection=DAILY), lake, kind)


def test_a_day_of_a_postgres_landing_table_is_scored(
    postgres: Cluster, tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    lake = _lake(postgres_table(postgres), tmp_path)
    _check_day(lake.materialize(DAY, instance, selection=DAILY), lake, "postgres")


def test_a_day_of_a_postgres_landing_query_is_loaded(
    postgres: Cluster, tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    lake = _lake(postgres_query(postgres), tmp_path)
    # the query names its id column differently: the scoring resource is told
    result = lake.materialize(DAY, instance, selection=dg.AssetSelection.assets("raw_conversations"),
                              resources={"scoring": ScoringResource(id_column="id")})
    assert result.success, _failure(result)
    raw = lake.read("raw_conversations", DAY)
    assert set(raw.get_column("id")) == OF_DAY
    assert raw.schema["context"] == pl.List(pl.String)  # text[] arrives as the list of passages it is


def test_the_sensor_skips_a_table_landing_and_leaves_its_days_to_the_schedule(tmp_path: Path) -> None:
    landing = delta_landing(tmp_path)
    defs = build_defs()
    sensor = defs.resolve_sensor_def("new_landing_files")
    with dg.instance_for_test() as instance, dg.build_sensor_context(
        instance=instance, definitions=defs, resources={"landing": LandingResource(**landing.fields)},  # type: ignore[arg-type]
    ) as context:
        data = sensor.evaluate_tick(context)
    assert not data.run_requests and "delta table" in (data.skip_message or "")
    assert "daily_scoring" in (data.skip_message or "")


def test_a_landing_url_with_a_password_enters_dagster_as_its_variable(
    postgres: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = postgres.url()
    monkeypatch.setenv("FP_LANDING", url)
    monkeypatch.setenv("FP_LANDING_QUERY", "app.conversations")
    landing = DefsSettings.from_env().landing
    # Dagster keeps the resource's config in every run's snapshot: only the variable's name goes there
    assert PASSWORD not in str(landing.model_dump()) and isinstance(landing.path, dg.EnvVar)
