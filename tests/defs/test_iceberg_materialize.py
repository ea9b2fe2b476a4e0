"""The day's table assets materialised with ``table_format="iceberg"``: every table a snapshot recorded in its
metadata, the tables read through the SQLite catalog by pyiceberg and polars; a day re-scored by another judge
(the fake OpenAI-compatible server) and both snapshots read back; a failed write leaves the snapshot as it was."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from faithfulness_pipeline.defs import DefsSettings, build_defs
from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.judging.llm.prompts import PROMPT_VERSION
from faithfulness_pipeline.tables.iceberg_tables import IcebergTables
from faithfulness_pipeline.testing.fakellm.server import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.defs.conftest import SAMPLE, TABLES, sample_ids
from tests.doc_blocks import block

DAY = "2026-11-25"
KEY_ENV = "FP_TEST_ICEBERG_JUDGE_KEY"
#: The day's tables, their checks, the DuckDB views and the report.
DAY_TABLES = dg.AssetSelection.groups("answer_quality")


def _run(env: dict[str, str], warehouse: Path, instance: dg.DagsterInstance,
         selection: dg.AssetSelection = DAY_TABLES) -> dg.ExecuteInProcessResult:
    settings = DefsSettings.from_env({"FP_LANDING": str(SAMPLE), "FP_WAREHOUSE": str(warehouse),
                                      "FP_TABLE_FORMAT": "iceberg", **env})
    defs = build_defs(settings)
    return dg.materialize([*(defs.assets or []), *(defs.asset_checks or [])], partition_key=DAY, instance=instance,
                          resources=defs.resources, selection=selection, raise_on_error=False)  # type: ignore[arg-type]


def _metadata(result: dg.ExecuteInProcessResult) -> dict[str, dict[str, object]]:
    return {str(e.asset_key.to_user_string() if e.asset_key else None):
            {k: getattr(v, "value", v) for k, v in e.materialization.metadata.items()}
            for e in result.get_asset_materialization_events()}


def test_the_day_in_iceberg_versions_per_judge_and_a_failed_write(
    tmp_path: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")  # polars' planner plugin is not installed
    warehouse = tmp_path / "warehouse"
    first = _run({}, warehouse, instance)
    assert first.success
    meta = _metadata(first)
    assert set(meta) == {*TABLES, "answer_quality_duckdb", "answer_quality_report"}
    views = meta.pop("answer_quality_duckdb")
    report = meta.pop("answer_quality_report")  # over the current snapshot's files: each of the day's rows once
    assert report["answers"] == len(sample_ids()[DAY]) and "offline-lexical-v1" in str(report["judges"])
    assert all(m["table_format"] == "iceberg" and str(m["table_version"]).isdigit() for m in meta.values())
    offline = str(meta["scored_conversations"]["table_version"])

    # the engines, through the catalog the warehouse made
    catalog = SqlCatalog("faithfulness", uri=f"sqlite:///{warehouse}/_iceberg_catalog.sqlite",
                         warehouse=warehouse.as_uri())
    scored = catalog.load_table(("faithfulness", "scored_conversations"))
    day = pl.scan_iceberg(scored, snapshot_id=int(offline)).filter(pl.col("ds") == DAY).collect()
    assert set(day.get_column("conversation_id").to_list()) == sample_ids()[DAY]
    assert day.height == len(sample_ids()[DAY]) and day.get_column("judge_model").unique().item() == "offline-lexical-v1"
    claims = catalog.load_table(("faithfulness", "claim_table")).scan(row_filter=f"ds == '{DAY}'").to_arrow()
    assert claims.num_rows == day.get_column("n_claims").sum()

    # the same day re-scored by an LLM judge: a new snapshot; both read back from the recorded versions
    monkeypatch.setenv(KEY_ENV, "sk-fp-iceberg-judge-9Xq2")
    for name, value in {"LITELLM_OFFLINE_MODE": "true", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}.items():
        monkeypatch.setenv(name, value)
    with FakeLLMServer(ScriptedJudge()) as server:
        second = _run({"FP_JUDGE_MODEL": "openai/fake-judge", "FP_JUDGE_API_BASE": server.base_url,
                       "FP_JUDGE_API_KEY_ENV": KEY_ENV, "FP_JUDGE_TIMEOUT_S": "10"}, warehouse, instance)
    assert second.success
    again = _metadata(second)["answer_quality_report"]  # the re-scored day once: the old snapshot's files are not read
    assert again["answers"] == len(sample_ids()[DAY]) and "offline" not in str(again["judges"]), again
    llm_meta = _metadata(second)["scored_conversations"]
    assert llm_meta["judge_model"] == "openai/fake-judge" and llm_meta["prompt_version"] == PROMPT_VERSION
    llm = str(llm_meta["table_version"])
    assert llm != offline
    resource = WarehouseResource(root=str(warehouse), table_format="iceberg")
    judges = {version: resource.scan("scored_conversations", [DAY], as_of=version)
              .select(pl.col("judge_model").unique()).collect().to_series().to_list()
              for version in (offline, llm)}
    assert judges == {offline: ["offline-lexical-v1"], llm: ["openai/fake-judge"]}
    # the BI views, rebuilt over the current snapshots' files: the LLM judge's day, its claims with evidence
    with duckdb.connect(str(warehouse / "answer_quality.duckdb"), read_only=True,
                        config={"file_search_path": str(warehouse)}) as con:
        assert con.execute("SELECT DISTINCT judge_model, day::VARCHAR FROM scored_conversations").fetchall() == \
            [("openai/fake-judge", DAY)]
        assert con.execute("SELECT count(*) FROM scored_conversations").fetchone() == (views["rows_scored_conversations"],)
        joined = con.execute("SELECT count(*), count(evidence) FROM claim_table c JOIN daily_answer_quality d "
                             "USING (day, model)").fetchone()
        assert joined is not None and joined[0] > 0
    assert pl.scan_iceberg(scored, snapshot_id=int(offline)).filter(pl.col("ds") == DAY).collect().equals(day)
    # the page's recipe for reading a past version, as printed
    recipe: dict[str, object] = {"warehouse": warehouse, "version": offline}
    exec(block("docs/table-formats.md", "python", "snapshot_id=int(version)"), recipe)
    assert isinstance(recipe["day"], pl.DataFrame) and recipe["day"].equals(day)

    # a write that fails midway: the run fails, the table's snapshot and the day stay the LLM judge's
    def broken(*_: object) -> None:
        raise OSError("disk full while writing the day")

    monkeypatch.setattr(IcebergTables, "_write_data_file", broken)
    third = _run({}, warehouse, instance)
    assert not third.success
    current = catalog.load_table(("faithfulness", "scored_conversations")).current_snapshot()
    assert current is not None and str(current.snapshot_id) == llm
    assert resource.scan("scored_conversations", [DAY]).select("judge_model").unique().collect().item() == \
        "openai/fake-judge"
