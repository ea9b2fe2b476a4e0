"""Schedule, sensor, undated tables, code versions (staleness after a prompt change), resources, import cost."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from dagster._core.definitions.data_version import StaleStatus
from dagster._utils.test.data_versions import get_stale_status_resolver

from faithfulness_pipeline.defs import DefsSettings, JudgeResource, build_defs
from faithfulness_pipeline.defs.resources import LandingResource
from faithfulness_pipeline.judging.llm.prompts import PROMPT_VERSION
from tests.defs.conftest import DAYS, REPO, SAMPLE, Built, make_lake

LLM_ASSETS = ("extracted_claims", "judged_claims", "scored_conversations", "claim_table", "daily_answer_quality")


def test_daily_schedule_requests_yesterday() -> None:
    defs = build_defs()
    schedule = defs.resolve_schedule_def("daily_scoring")
    assert schedule.cron_schedule == "30 1 * * *"
    tick = datetime(2026, 11, 27, 1, 30, tzinfo=UTC)
    with dg.instance_for_test() as instance:
        context = dg.build_schedule_context(instance=instance, scheduled_execution_time=tick)
        requests = schedule.evaluate_tick(context).run_requests
    assert requests is not None
    assert [r.partition_key for r in requests] == ["2026-11-26"]


@dataclass
class Tick:
    keys: list[str]
    run_keys: list[str]
    cursor: str | None
    skipped: str | None


def _tick(
    defs: dg.Definitions, landing: Path, cursor: str | None, instance: dg.DagsterInstance, **fields: object
) -> Tick:
    sensor = defs.resolve_sensor_def("new_landing_files")
    with dg.build_sensor_context(
        instance=instance,
        cursor=cursor,
        definitions=defs,
        resources={"landing": LandingResource(path=str(landing), **fields)},  # type: ignore[arg-type]
    ) as context:
        data = sensor.evaluate_tick(context)
    requests = list(data.run_requests or [])
    return Tick(
        keys=[r.partition_key for r in requests if r.partition_key],
        run_keys=[r.run_key for r in requests if r.run_key],
        cursor=data.cursor,
        skipped=data.skip_message,
    )


def test_sensor_requests_the_days_of_new_and_rewritten_files(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    shutil.copy(SAMPLE / "flat" / "conversations.parquet", landing / "flat.parquet")
    defs = build_defs()
    with dg.instance_for_test() as instance:
        first = _tick(defs, landing, None, instance)
        assert first.keys == list(DAYS)
        again = _tick(defs, landing, first.cursor, instance)
        assert again.keys == [] and again.skipped is not None and "no new Parquet files" in again.skipped

        # a new file with rows of one day only: only that day is requested
        chat = pl.read_parquet(SAMPLE / "chat" / "conversations.parquet")
        chat.filter(pl.col("created_at").dt.date().cast(pl.String) == "2026-11-25").write_parquet(
            landing / "chat.parquet"
        )
        second = _tick(defs, landing, first.cursor, instance)
        assert second.keys == ["2026-11-25"]
        assert second.run_keys[0] != first.run_keys[1]  # a new run for that day, not deduplicated away
        assert set(json.loads(second.cursor or "{}")) == {str(landing / "flat.parquet"), str(landing / "chat.parquet")}

        # an undated file belongs to its arrival day; today has no partition yet, so nothing is requested
        pl.read_parquet(landing / "chat.parquet").drop("created_at").write_parquet(landing / "undated.parquet")
        third = _tick(defs, landing, second.cursor, instance)
        assert third.keys == []
        # ... until it is rewritten with an older arrival time (the sensor sees the change)
        arrival = datetime(2026, 11, 26, 8, 0, tzinfo=UTC).timestamp()
        os.utime(landing / "undated.parquet", (arrival, arrival))
        assert _tick(defs, landing, third.cursor, instance).keys == ["2026-11-26"]
        # a fixed day for undated rows wins over the arrival day
        assert "2026-11-24" in _tick(defs, landing, None, instance, undated_day="2026-11-24").keys


def test_an_empty_landing_folder_skips(tmp_path: Path) -> None:
    (tmp_path / "landing").mkdir()
    with dg.instance_for_test() as instance:
        tick = _tick(build_defs(), tmp_path / "landing", None, instance)
    assert tick.keys == [] and tick.skipped is not None


def test_undated_rows_load_into_their_arrival_day(tmp_path: Path, instance: dg.DagsterInstance) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    undated = landing / "undated.parquet"
    flat = pl.read_parquet(SAMPLE / "flat" / "conversations.parquet")
    flat.drop("created_at").head(4).write_parquet(undated)
    arrival = datetime(2026, 11, 26, 23, 59, tzinfo=UTC).timestamp()
    os.utime(undated, (arrival, arrival))
    lake = make_lake(landing, tmp_path / "warehouse")
    raw_only = dg.AssetSelection.assets("raw_conversations")
    assert lake.materialize("2026-11-26", instance, selection=raw_only).success
    assert lake.read("raw_conversations", "2026-11-26").height == 4
    assert lake.materialize("2026-11-25", instance, selection=raw_only).success
    assert lake.read("raw_conversations", "2026-11-25").height == 0  # an empty day keeps its columns
    assert "row_key" in lake.read("raw_conversations", "2026-11-25").columns

    pinned = make_lake(landing, tmp_path / "pinned", undated_day="2026-11-24")
    assert pinned.materialize("2026-11-24", instance, selection=raw_only).success
    assert pinned.read("raw_conversations", "2026-11-24").height == 4


def _code_versions(defs: dg.Definitions) -> dict[str, str | None]:
    graph = defs.resolve_asset_graph()
    return {key.to_user_string(): graph.get(key).code_version for key in graph.get_all_asset_keys()}


def test_code_versions_follow_the_judge_and_its_prompt_version() -> None:
    offline = _code_versions(build_defs())
    llm = _code_versions(build_defs(DefsSettings(judge=JudgeResource(model="openai/gpt-4o-mini"))))
    assert offline["raw_conversations"] == llm["raw_conversations"]  # loading does not depend on the judge
    for asset in LLM_ASSETS:
        assert offline[asset] != llm[asset]
        assert "offline-lexical-2" in (offline[asset] or "")
        assert PROMPT_VERSION in (llm[asset] or "")


def test_a_prompt_change_makes_the_scored_tables_stale(built: Built) -> None:
    day = "2026-11-25"
    same = get_stale_status_resolver(built.instance, list(built.lake.defs.assets))  # type: ignore[arg-type]
    assert same.get_status(dg.AssetKey("scored_conversations"), partition_key=day) == StaleStatus.FRESH
    changed = build_defs(DefsSettings(judge=JudgeResource(model="openai/gpt-4o-mini")))
    resolver = get_stale_status_resolver(built.instance, list(changed.assets))  # type: ignore[arg-type]
    for asset in LLM_ASSETS:
        assert resolver.get_status(dg.AssetKey(asset), partition_key=day) == StaleStatus.STALE, asset
    assert resolver.get_status(dg.AssetKey("raw_conversations"), partition_key=day) == StaleStatus.FRESH


def test_a_missing_api_key_fails_before_any_row_naming_the_variable(
    tmp_path: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FP_TEST_NO_SUCH_KEY", raising=False)
    settings = DefsSettings.from_env(
        {
            "FP_JUDGE_MODEL": "openai/gpt-4o-mini",
            "FP_JUDGE_API_KEY_ENV": "FP_TEST_NO_SUCH_KEY",
            "FP_LANDING": str(SAMPLE),
            "FP_WAREHOUSE": str(tmp_path / "warehouse"),
        }
    )
    defs = build_defs(settings)
    with pytest.raises(dg.DagsterInvalidConfigError, match="FP_TEST_NO_SUCH_KEY"):
        dg.materialize(
            list(defs.assets or []),  # type: ignore[arg-type]
            partition_key="2026-11-25",
            instance=instance,
            resources=defs.resources,
        )
    assert not (tmp_path / "warehouse").exists()  # refused before any row was read


def test_importing_the_code_location_stays_light() -> None:
    """Every step process and `dagster dev` import it: no litellm, no duckdb at import time."""
    code = (
        "import sys, time\n"
        "t0 = time.perf_counter(); import dagster; t1 = time.perf_counter()\n"
        "import faithfulness_pipeline.definitions; t2 = time.perf_counter()\n"
        "print(t1 - t0, t2 - t1, 'litellm' in sys.modules, 'duckdb' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    dagster_s, ours_s, litellm, duckdb = out.stdout.split()
    print(f"import dagster {float(dagster_s):.2f}s, then faithfulness_pipeline.definitions {float(ours_s):.2f}s")
    assert (litellm, duckdb) == ("False", "False")


def test_the_sensor_says_rows_before_the_first_partition_will_never_be_scored(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    old = datetime(2025, 1, 3, 9, tzinfo=UTC)
    pl.DataFrame({"conversation_id": ["old-1"], "created_at": [old], "output": ["大桥于1901年开放。"]}).write_parquet(
        landing / "archive.parquet"
    )
    with dg.instance_for_test() as instance:
        tick = _tick(build_defs(), landing, None, instance)
    assert tick.keys == []
    assert tick.skipped is not None and "never be scored" in tick.skipped and "archive.parquet" in tick.skipped
    assert "FP_PARTITIONS_START" in tick.skipped
