"""The whole graph materialised in-process, per day; idempotent re-materialisation; the DuckDB views."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
from polars.testing import assert_frame_equal

from tests.defs.conftest import ASSETS, DAYS, TABLES, Built, copy_lake, sample_ids


def test_every_asset_and_check_succeeds_for_every_day(built: Built) -> None:
    results = built.results
    for result in results.values():
        assert result.success
        keys = {
            str(e.asset_key.to_user_string() if e.asset_key else None)
            for e in result.get_asset_materialization_events()
        }
        assert keys == ASSETS
        evaluations = result.get_asset_check_evaluations()
        assert len(evaluations) == 11  # ten rules, and whether an LLM judge scored the day
        failed = [(e.asset_key.to_user_string(), e.check_name, e.severity) for e in evaluations if not e.passed]
        # only the WARN that these days were scored by the offline baseline (no model set)
        assert failed == [("scored_conversations", "llm_judge_used", dg.AssetCheckSeverity.WARN)]


def test_every_sample_row_is_scored_in_its_day(built: Built) -> None:
    lake = built.lake
    expected = sample_ids()
    assert sorted(expected) == list(DAYS)
    total = 0
    for day in DAYS:
        scored = lake.read("scored_conversations", day)
        assert set(scored.get_column("row_key").to_list()) == expected[day]
        assert scored.height == len(expected[day])
        assert scored.get_column("created_at").dt.date().cast(pl.String).unique().to_list() == [day]
        assert set(scored.get_column("status").to_list()) == {"ok"}
        assert scored.get_column("judge_model").unique().to_list() == ["offline-lexical-v1"]
        claims = lake.read("claim_table", day)
        assert claims.height == scored.get_column("n_claims").sum()
        daily = lake.read("daily_answer_quality", day)
        assert daily.get_column("answers").sum() == scored.height
        assert daily.get_column("day").cast(pl.String).unique().to_list() == [day]
        for staging in ("raw_conversations", "extracted_claims", "judged_claims"):
            assert lake.read(staging, day).height == scored.height
        total += scored.height
    assert total == 26  # 17 flat + 9 chat sample conversations
    # both input shapes, every language of the sample
    languages = set(
        pl.concat([lake.read("scored_conversations", d) for d in DAYS], how="diagonal_relaxed")
        .get_column("language")
        .to_list()
    )
    assert languages == {"en", "zh-TW", "zh-CN", "ko"}


def test_metadata_records_judge_usage_and_worst_answers(built: Built) -> None:
    results = built.results
    events = {
        str(e.asset_key.to_user_string() if e.asset_key else None): e.materialization.metadata
        for e in results["2026-11-25"].get_asset_materialization_events()
    }
    for key, prefix in (("extracted_claims", "extraction_"), ("judged_claims", ""), ("scored_conversations", "")):
        meta = events[key]
        assert meta["judge_model"].value == "offline-lexical-v1"
        assert meta["prompt_version"].value == "offline-lexical-1"
        for field in ("llm_requests", "prompt_tokens", "completion_tokens", "cost_usd"):
            assert prefix + field in meta, (key, field)
        assert "dagster/row_count" in meta and "dagster/column_schema" in meta
    scored = events["scored_conversations"]
    assert scored["dagster/row_count"].value == 9
    distribution = str(scored["score_distribution"].value)
    assert "| [0.8, 1] |" in distribution and "| error | 0 | 0 |" in distribution
    worst = str(scored["worst_answers"].value)
    # flat-001 says 2008 where the context says 2007: it is among the worst, with its contradicted claim
    assert "flat-001" in worst and "**contradicted**" in worst and "2008" in worst
    assert "|" in str(events["daily_answer_quality"]["preview"].value)


def test_duckdb_views_answer_bi_queries(built: Built) -> None:
    lake = built.lake
    con = duckdb.connect(str(lake.warehouse / "answer_quality.duckdb"), read_only=True)
    try:
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        assert views == {"scored_conversations", "claim_table", "daily_answer_quality"}
        per_day = con.execute(
            "SELECT CAST(ds AS VARCHAR), count(*) FROM scored_conversations GROUP BY ds ORDER BY ds"
        ).fetchall()
        assert per_day == [("2026-11-24", 9), ("2026-11-25", 9), ("2026-11-26", 8)]
        answers = con.execute("SELECT sum(answers) FROM daily_answer_quality").fetchone()
        assert answers == (26,)
        contradicted = con.execute(
            "SELECT s.model, c.claim FROM claim_table c JOIN scored_conversations s USING (ds, row_key) "
            "WHERE c.verdict = 'contradicted' ORDER BY c.claim"
        ).fetchall()
        assert any("2008" in claim for _, claim in contradicted)
        assert any("4000" in claim for _, claim in contradicted)  # zh-CN battery capacity
    finally:
        con.close()


def _snapshot(warehouse: Path) -> dict[str, pl.DataFrame]:
    return {str(p.relative_to(warehouse)): pl.read_parquet(p) for p in sorted(warehouse.glob("*/ds=*/*.parquet"))}


def test_rematerialising_a_day_replaces_exactly_it(built: Built, tmp_path: Path) -> None:
    lake = copy_lake(built.lake, tmp_path)
    warehouse = lake.warehouse
    before = _snapshot(warehouse)
    untouched = {p: p.stat().st_mtime_ns for p in warehouse.glob("*/ds=2026-11-24/*")}
    stray = warehouse / "scored_conversations" / "ds=2026-11-25" / "part-0-old.parquet"
    before["scored_conversations/ds=2026-11-25/data.parquet"].write_parquet(stray)

    with dg.instance_for_test() as instance:
        # the second materialisation of this day (the session fixture made the first)
        assert lake.materialize("2026-11-25", instance).success

    after = _snapshot(warehouse)
    assert sorted(after) == sorted(before)  # the stray file is gone, nothing else appeared
    assert not [p for p in warehouse.rglob("*") if p.name.endswith(".tmp")]
    for name, frame in before.items():
        new = after[name]
        # scored_at records when a row was scored: the only column a re-run may change
        keep = [c for c in frame.columns if c != "scored_at"]
        assert_frame_equal(new.select(keep), frame.select(keep))
        if "row_key" in frame.columns and not name.startswith("claim_table"):
            assert new.get_column("row_key").n_unique() == new.height
    assert {p: p.stat().st_mtime_ns for p in warehouse.glob("*/ds=2026-11-24/*")} == untouched
    con = duckdb.connect(str(warehouse / "answer_quality.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT count(*), count(DISTINCT row_key) FROM scored_conversations").fetchone() == (26, 26)
    finally:
        con.close()


def test_a_day_without_conversations_gives_empty_tables_with_their_schemas(built: Built, tmp_path: Path) -> None:
    lake = copy_lake(built.lake, tmp_path)
    with dg.instance_for_test() as instance:
        result = lake.materialize("2026-11-27", instance)  # the day after the sample data
    assert result.success
    assert all(e.passed for e in result.get_asset_check_evaluations())
    for table in TABLES:
        empty = lake.read(table, "2026-11-27")
        assert empty.height == 0
        assert empty.schema == lake.read(table, "2026-11-26").schema, table
    scored = lake.read("scored_conversations", "2026-11-27")
    assert {"row_key", "hallucination_score", "faithfulness_score", "status", "verdicts"} <= set(scored.columns)
