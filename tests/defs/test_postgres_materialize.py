"""A day's assets materialised into the postgres table format (the worker's throwaway cluster): the tables and
their BI views read back by SQL, a re-materialisation by another judge readable as of both recorded
table_versions, and a failed step that leaves the day as it was."""

from __future__ import annotations

import itertools
from pathlib import Path

import dagster as dg
import polars as pl
import psycopg
import pytest

from faithfulness_pipeline.defs import DefsSettings, build_defs
from faithfulness_pipeline.defs.resources import JudgeResource, LabelsResource, LandingResource, WarehouseResource
from faithfulness_pipeline.tables.postgres_tables import PostgresSink
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.defs.conftest import ASSETS, TABLES, Lake, sample_ids
from tests.doc_blocks import block
from tests.postgres_cluster import PASSWORD, Cluster

DAY = "2026-11-25"
PAGE = "docs/table-formats.md"
_DATABASES = itertools.count()
DAILY = dg.AssetSelection.groups("answer_quality")


@pytest.fixture
def database(postgres: Cluster) -> str:
    name = f"materialize_{next(_DATABASES)}"
    postgres.psql(f"CREATE DATABASE {name}")
    return postgres.url(database=name)


def _lake(landing: Path, tmp_path: Path, database: str) -> Lake:
    warehouse = WarehouseResource(root=str(tmp_path / "warehouse"), table_format="postgres", postgres_url=database)
    settings = DefsSettings(landing=LandingResource(path=str(landing)), warehouse=warehouse, labels=LabelsResource())
    return Lake(landing, tmp_path / "warehouse", build_defs(settings))


def _versions(result: dg.ExecuteInProcessResult) -> dict[str, str]:
    versions = {}
    for event in result.get_asset_materialization_events():
        meta = event.materialization.metadata
        if "table_version" in meta:
            assert meta["table_format"].value == "postgres"
            versions[event.asset_key.to_user_string()] = str(meta["table_version"].value)
    return versions


def _sql(database: str, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(database) as conn:
        return conn.execute(query).fetchall()


def test_a_day_in_postgres_reads_back_by_sql_and_as_of_each_judge(
    landing: Path, tmp_path: Path, database: str, instance: dg.DagsterInstance
) -> None:
    lake = _lake(landing, tmp_path, database)
    first = lake.materialize(DAY, instance, selection=DAILY)
    assert first.success
    failed = [(e.asset_key.to_user_string(), e.check_name) for e in first.get_asset_check_evaluations() if not e.passed]
    assert failed == [("scored_conversations", "llm_judge_used")]  # the offline judge's WARN, as with parquet
    offline = _versions(first)
    assert set(offline) == set(TABLES)
    assert not (tmp_path / "warehouse" / "scored_conversations").exists()  # the rows went to the database
    assert {e.asset_key.to_user_string() for e in first.get_asset_materialization_events()} == ASSETS
    report = (tmp_path / "warehouse" / "answer_quality_report.html").read_text(encoding="utf-8")
    assert "offline-lexical-v1" in report  # made from the database's rows, copied out for it
    expected = sample_ids()[DAY]
    # The BI views, by SQL, as a BI tool reads them.
    assert _sql(database, "SELECT count(*), count(DISTINCT row_key), min(day)::text, max(judge_model) "
                          "FROM faithfulness.scored_conversations") == [(len(expected), len(expected), DAY,
                                                                         "offline-lexical-v1")]
    answers = _sql(database, "SELECT sum(answers) FROM faithfulness.daily_answer_quality WHERE day = '2026-11-25'")
    assert answers == [(len(expected),)]
    claims = _sql(database, "SELECT count(*), count(evidence) FROM faithfulness.claim_table "
                            "WHERE verdict = 'supported'")
    assert claims[0][0] > 0 and claims[0][1] == claims[0][0]  # each supported claim's passage, from the verdicts
    languages = _sql(database, "SELECT DISTINCT r.language FROM faithfulness.raw_conversations r ORDER BY 1")
    assert [r[0] for r in languages] == sorted({"en", "zh-TW", "zh-CN", "ko"} & {r[0] for r in languages})
    before = lake.defs.resources["warehouse"].scan("scored_conversations", [DAY]).collect()  # type: ignore[union-attr]

    # Another judge re-scores the day: a new load of each judged table, the offline one still readable.
    with FakeLLMServer(ScriptedJudge()) as server:
        judge = JudgeResource(model="openai/scripted-judge", api_base=server.base_url, api_key="sk-scripted-0123")
        second = lake.materialize(DAY, instance, resources={"judge": judge}, selection=DAILY)
    assert second.success
    scripted = _versions(second)
    warehouse: WarehouseResource = lake.defs.resources["warehouse"]  # type: ignore[assignment]
    now = warehouse.scan("scored_conversations", [DAY]).collect()
    assert set(now.get_column("judge_model")) == {"openai/scripted-judge"}
    as_first = warehouse.scan("scored_conversations", [DAY], as_of=offline["scored_conversations"]).collect()
    assert as_first.equals(before)
    as_second = warehouse.scan("scored_conversations", [DAY], as_of=scripted["scored_conversations"]).collect()
    assert as_second.equals(now)
    assert _sql(database, "SELECT DISTINCT judge_model FROM faithfulness.scored_conversations") == [
        ("openai/scripted-judge",)]
    loads = _sql(database, "SELECT load_id, replaced_by FROM faithfulness._loads WHERE table_name = "
                           "'scored_conversations' ORDER BY load_id")
    assert loads == [(int(offline["scored_conversations"]), int(scripted["scored_conversations"])),
                     (int(scripted["scored_conversations"]), None)]
    # The page's Python reads the first judge's day back, and its SQL runs, as printed.
    names: dict[str, object] = {"url": database, "table_version": offline["scored_conversations"]}
    exec(block(PAGE, "python", "table_format=\"postgres\", postgres_url=url"), names)  # the docs' own snippet, as printed
    assert isinstance(names["published"], pl.DataFrame) and names["published"].equals(before)
    statements = [q for q in block(PAGE, "sql", "faithfulness._loads").split(";\n") if q.strip()]
    trend, day_loads, first_load = (_sql(database, q) for q in statements)
    assert {r[1] for r in trend} == set(before.get_column("model")) and [r[0] for r in day_loads] == [
        int(offline["scored_conversations"]), int(scripted["scored_conversations"])]
    assert sorted(first_load) == sorted(before.select("row_key", "judge_model", "hallucination_score").rows())
    # No password in any metadata the runs recorded.
    for result in (first, second):
        for event in result.get_asset_materialization_events():
            assert PASSWORD not in str(event.materialization.metadata)


def test_a_failed_step_leaves_the_day_as_it_was(
    landing: Path, tmp_path: Path, database: str, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = _lake(landing, tmp_path, database)
    assert lake.materialize(DAY, instance, selection=DAILY).success
    warehouse: WarehouseResource = lake.defs.resources["warehouse"]  # type: ignore[assignment]
    before = warehouse.scan("scored_conversations", [DAY]).collect()
    loads = _sql(database, "SELECT load_id, replaced_by FROM faithfulness._loads ORDER BY load_id")
    copy = PostgresSink.write

    def copy_then_fail(sink: PostgresSink, frame: pl.DataFrame) -> None:
        copy(sink, frame)  # the chunk's rows are in the load's transaction when the step dies
        raise RuntimeError("the worker died mid-day")

    monkeypatch.setattr(PostgresSink, "write", copy_then_fail)
    again = lake.materialize(DAY, instance, selection=dg.AssetSelection.assets("scored_conversations"))
    assert not again.success
    assert "the worker died mid-day" in str(next(e for e in again.all_events if e.is_step_failure).event_specific_data)
    assert _sql(database, "SELECT load_id, replaced_by FROM faithfulness._loads ORDER BY load_id") == loads
    assert warehouse.scan("scored_conversations", [DAY]).collect().equals(before)
    assert _sql(database, "SELECT count(*) FROM faithfulness.scored_conversations__versions") == [(before.height,)]


def _resource_failure(result: dg.ExecuteInProcessResult) -> str:
    """Why the step's resources could not start (the warehouse checks its tables when a step starts)."""
    return " ".join(str(e.event_specific_data) for e in result.all_events
                    if e.event_type_value == "RESOURCE_INIT_FAILURE")


def test_postgres_without_a_url_is_refused_naming_the_setting(landing: Path, tmp_path: Path,
                                                              instance: dg.DagsterInstance) -> None:
    settings = DefsSettings(landing=LandingResource(path=str(landing)),
                            warehouse=WarehouseResource(root=str(tmp_path), table_format="postgres"))
    result = Lake(landing, tmp_path, build_defs(settings)).materialize(
        DAY, instance, selection=dg.AssetSelection.assets("raw_conversations"))
    assert not result.success
    assert "FP_POSTGRES_URL / warehouse.postgres_url is not set" in _resource_failure(result)
    assert not (tmp_path / "_staging").exists()  # refused when the step started, before it read the landing rows


def test_an_unreachable_database_stops_the_step_before_it_works(
    landing: Path, tmp_path: Path, postgres: Cluster, instance: dg.DagsterInstance
) -> None:
    wrong = postgres.url(password="not-" + PASSWORD)
    lake = _lake(landing, tmp_path, wrong)
    result = lake.materialize(DAY, instance, selection=dg.AssetSelection.assets("raw_conversations"))
    assert not result.success
    error = _resource_failure(result)
    assert "FP_POSTGRES_URL / warehouse.postgres_url" in error and "cannot be reached" in error
    assert PASSWORD not in error
