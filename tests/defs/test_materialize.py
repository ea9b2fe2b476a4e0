"""The whole graph materialised in-process, per day; idempotent re-materialisation; the DuckDB views."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from faithfulness_pipeline.core.port import settings_hash
from faithfulness_pipeline.judging.offline.judge import OfflineJudge
from tests.defs.conftest import ASSETS, DAYS, TABLES, Built, Lake, copy_lake, sample_ids
from tests.doc_blocks import block


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
        assert len(evaluations) == 15  # eleven rules, whether an LLM judge scored the day, the spend cap, the labels' two
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
        assert meta["prompt_version"].value == "offline-lexical-2"
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


def _bi(warehouse: Path, database: Path | None = None) -> duckdb.DuckDBPyConnection:
    """The BI file as a tool opens it: its views' paths resolve from the warehouse root (file_search_path)."""
    target = database or warehouse / "answer_quality.duckdb"
    return duckdb.connect(str(target), read_only=True, config={"file_search_path": str(warehouse)})


def test_duckdb_views_answer_bi_queries(built: Built) -> None:
    lake = built.lake
    con = _bi(lake.warehouse)
    try:
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        assert views == {"scored_conversations", "claim_table", "daily_answer_quality", "raw_conversations",
                         "daily_model_comparison", "daily_corrected_quality"}
        per_day = con.execute(
            "SELECT CAST(day AS VARCHAR), count(*) FROM scored_conversations GROUP BY day ORDER BY day"
        ).fetchall()
        assert per_day == [("2026-11-24", 9), ("2026-11-25", 9), ("2026-11-26", 8)]
        answers = con.execute("SELECT sum(answers) FROM daily_answer_quality").fetchone()
        assert answers == (26,)
        # the claim table carries the answer's day, model and conversation id: no join needed
        contradicted = con.execute(
            "SELECT CAST(day AS VARCHAR), model, conversation_id, claim FROM claim_table "
            "WHERE verdict = 'contradicted' ORDER BY claim"
        ).fetchall()
        assert any("2008" in claim for *_, claim in contradicted)
        assert any("4000" in claim for *_, claim in contradicted)  # zh-CN battery capacity
        joined = con.execute(
            "SELECT count(*) FROM claim_table c JOIN scored_conversations s USING (day, row_key) "
            "WHERE c.model IS DISTINCT FROM CAST(s.model AS VARCHAR) OR c.conversation_id <> s.conversation_id"
        ).fetchone()
        assert joined == (0,)
        assert con.execute("SELECT count(*) FROM claim_table WHERE model IS NULL OR day IS NULL").fetchone() == (0,)
        # the files hold no passage; the view brings each claim's from its answer's verdicts
        assert "evidence" not in lake.read("claim_table", "2026-11-25").columns
        claims = pl.concat([lake.read("scored_conversations", d) for d in DAYS]).select(
            "row_key", pl.col("verdicts").list.eval(pl.element().struct.field("evidence")).alias("evidence"),
        ).with_columns(pl.int_ranges(pl.col("evidence").list.len()).alias("claim_index")).explode(
            "evidence", "claim_index").drop_nulls("claim_index")
        viewed = pl.DataFrame(con.execute("SELECT row_key, claim_index, evidence FROM claim_table").fetchall(),
                              schema=["row_key", "claim_index", "evidence"], orient="row")
        both = claims.join(viewed, on=["row_key", "claim_index"], how="full", suffix="_view")
        assert both.height == viewed.height == claims.height > 0
        assert both.filter(pl.col("evidence").ne_missing(pl.col("evidence_view"))).is_empty()
        assert both.get_column("evidence_view").drop_nulls().len() > 0
        # the passages stay in raw_conversations: a join by row key and day finds every scored answer's
        with_context = con.execute(
            "SELECT count(*) FROM scored_conversations s JOIN raw_conversations r USING (row_key, day) "
            "WHERE r.context IS NOT NULL OR r.messages IS NOT NULL"
        ).fetchone()
        assert with_context == (26,)
        # one day column per view, a DATE
        for view in sorted(views):
            types = dict(con.execute(f"SELECT column_name, data_type FROM duckdb_columns() "
                                     f"WHERE table_name = '{view}'").fetchall())
            assert types["day"] == "DATE" and "ds" not in types, view
    finally:
        con.close()


def test_views_and_columns_carry_the_descriptions_dagster_shows(built: Built) -> None:
    from faithfulness_pipeline.outputs import describe

    con = _bi(built.lake.warehouse)
    try:
        views = dict(con.execute("SELECT view_name, comment FROM duckdb_views() WHERE NOT internal").fetchall())
        assert all(views.values()), views
        comments = con.execute(
            "SELECT table_name, column_name, comment FROM duckdb_columns() WHERE table_name IN "
            "('scored_conversations', 'claim_table', 'daily_answer_quality')"
        ).fetchall()
    finally:
        con.close()
    described = {(t, c): text for t, c, text in comments if text}
    assert described[("daily_answer_quality", "hallucination_p90")] == describe("daily_answer_quality",
                                                                                  "hallucination_p90")
    # every column the product writes is described; only the user's own passthrough columns are not
    passthrough = {"conversation_id", "created_at", "model", "language", "input", "output", "context", "messages",
                   "turn", "assistant_turn"}
    bare = [(t, c) for t, c, text in comments if not text and not (t == "scored_conversations" and c in passthrough)]
    assert bare == []
    events = built.results["2026-11-25"].get_asset_materialization_events()
    schema = next(e.materialization.metadata["dagster/column_schema"].value for e in events
                  if e.asset_key and e.asset_key.to_user_string() == "daily_answer_quality")
    assert {c.name: c.description for c in schema.columns}["hallucination_p90"] == described[
        ("daily_answer_quality", "hallucination_p90")]


def test_the_bi_file_works_after_the_warehouse_moves(built: Built, tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere" / "warehouse 2"
    shutil.copytree(built.lake.warehouse, moved)
    con = _bi(moved)
    try:
        assert con.execute("SELECT count(*) FROM scored_conversations").fetchone() == (26,)
        assert con.execute("SELECT count(*) FROM daily_answer_quality").fetchone()[0] > 0  # type: ignore[index]
    finally:
        con.close()
    # or with the warehouse as the working directory, as `cd warehouse && duckdb answer_quality.duckdb` does
    script = ("import duckdb; c = duckdb.connect('answer_quality.duckdb', read_only=True); "
              "print(c.execute('SELECT count(*) FROM claim_table').fetchone()[0])")
    done = subprocess.run([sys.executable, "-c", script], cwd=moved, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == pl.read_parquet(list(moved.glob("claim_table/ds=*/data.parquet"))).height
    assert str(built.lake.warehouse) not in (moved / "answer_quality.duckdb").read_bytes().decode("latin-1")


def test_the_report_asset_links_its_file_and_previews_the_headline(built: Built) -> None:
    events = {
        e.asset_key.to_user_string(): e.materialization.metadata
        for e in built.results["2026-11-26"].get_asset_materialization_events() if e.asset_key
    }
    meta = events["answer_quality_report"]
    path = Path(meta["path"].value)
    assert path == built.lake.warehouse / "answer_quality_report.html" and path.is_file()
    assert meta["answers"].value == 26 and meta["error_rows"].value == 0  # every day, not only the run's
    assert meta["period"].value == "2026-11-24 .. 2026-11-26" and "offline-lexical-v1" in meta["judges"].value
    assert "| answers | 26 |" in str(meta["preview"].value)
    html = path.read_text(encoding="utf-8")
    assert 'id="baseline-warning"' in html and html.count("<svg ") == 4
    assert 'data-row-key="flat-001"' in html


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
        again = lake.materialize("2026-11-25", instance)
        assert again.success

    after = _snapshot(warehouse)
    assert sorted(after) == sorted(before)  # the stray file is gone, nothing else appeared
    assert not [p for p in warehouse.rglob("*") if p.name.endswith(".tmp")]
    for name, frame in before.items():
        new = after[name]
        # when and by which run a row was scored: the only columns a re-run may change
        keep = [c for c in frame.columns if c not in ("scored_at", "scoring_run_id")]
        assert_frame_equal(new.select(keep), frame.select(keep))
        if "row_key" in frame.columns and not name.startswith("claim_table"):
            assert new.get_column("row_key").n_unique() == new.height
    assert {p: p.stat().st_mtime_ns for p in warehouse.glob("*/ds=2026-11-24/*")} == untouched
    # every scored row names the run that scored it: the first materialisation's, now this one's
    scored = "scored_conversations/ds=2026-11-25/data.parquet"
    first_run = set(before[scored].get_column("scoring_run_id"))
    assert len(first_run) == 1 and None not in first_run
    assert set(after[scored].get_column("scoring_run_id")) == {again.run_id} != first_run
    # and the judge settings that shaped it, carried from the judging step (judged_claims) to the scored row
    offline = settings_hash(OfflineJudge().result_scope())
    assert set(after[scored].get_column("judge_settings_hash")) == {offline}
    assert set(after["judged_claims/ds=2026-11-25/data.parquet"].get_column("judge_settings_hash")) == {offline}
    con = _bi(warehouse)
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


def test_the_documented_bi_queries_run(built: Built) -> None:
    sql = block("docs/report.md", "sql", "daily_answer_quality")
    statements = [s for s in sql.split(";") if any(line.strip() and not line.strip().startswith("--")
                                                    for line in s.splitlines())]
    assert len(statements) == 6
    con = _bi(built.lake.warehouse)
    try:
        results = [con.execute(statement).fetchall() for statement in statements]
    finally:
        con.close()
    assert results[0] and results[3] and results[4]  # the trend, the worst answers, the contradicted claims


def test_the_report_command_reads_a_warehouse_like_the_asset(built: Built, tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    done = subprocess.run(
        [sys.executable, "-m", "faithfulness_pipeline.cli", "report", str(built.lake.warehouse), "-o", str(target)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "26 answers over 2026-11-24 .. 2026-11-26" in done.stderr

    def rows(html: str) -> list[str]:
        return [part.split('"', 1)[0] for part in html.split('data-row-key="')[1:]]

    asset_page = (built.lake.warehouse / "answer_quality_report.html").read_text(encoding="utf-8")
    scored = pl.read_parquet(built.lake.warehouse / "scored_conversations" / "**" / "*.parquet")
    flagged = scored.filter(pl.col("hallucination_score") > 0).height  # the page's worst answers: 20 at most
    assert rows(target.read_text(encoding="utf-8")) == rows(asset_page) and len(rows(asset_page)) == min(20, flagged)


def test_a_day_judged_by_the_former_layout_is_scored_as_before(
    lake: Lake, instance: dg.DagsterInstance
) -> None:
    """Claims and verdicts tables written before each column was stored once (every input column in each,
    both steps' usage summed on the verdicts, a _fp_judge column) still score to the same table."""
    day = DAYS[1]
    assert lake.materialize(day, instance).success
    expected = lake.read("scored_conversations", day).drop("scored_at", "scoring_run_id")
    raw, claims, verdicts = (lake.read(t, day) for t in ("raw_conversations", "extracted_claims", "judged_claims"))
    usage = ["llm_calls", "prompt_tokens", "completion_tokens", "cost_usd"]
    judge = pl.lit("offline-lexical-v1|offline-lexical-2").alias("_fp_judge")
    old_claims = raw.join(claims, on="row_key", how="left").with_columns(judge)
    summed = verdicts.join(claims.select("row_key", *[pl.col(u).alias(f"x_{u}") for u in usage]), on="row_key")
    summed = summed.with_columns(pl.col(u) + pl.col(f"x_{u}") for u in usage).drop(f"x_{u}" for u in usage)
    old_verdicts = raw.join(claims.select("row_key", "_fp_claims"), on="row_key").join(
        summed, on="row_key").with_columns(judge)
    for table, frame in (("extracted_claims", old_claims), ("judged_claims", old_verdicts)):
        frame.write_parquet(lake.warehouse / table / f"ds={day}" / "data.parquet")
    again = lake.materialize(day, instance, selection=dg.AssetSelection.assets("scored_conversations"))
    assert again.success
    assert lake.read("scored_conversations", day).drop("scored_at", "scoring_run_id").equals(expected)


def test_a_day_judged_before_cached_prompt_tokens_were_counted_still_scores(
    lake: Lake, instance: dg.DagsterInstance
) -> None:
    """extracted_claims and judged_claims written without the cached prompt token columns score as if they
    held 0: none were counted then."""
    day = DAYS[2]
    assert lake.materialize(day, instance).success
    expected = lake.read("scored_conversations", day).drop("scored_at", "scoring_run_id")
    assert {"cached_prompt_tokens", "billed_cached_prompt_tokens"} <= set(expected.columns)
    for table in ("extracted_claims", "judged_claims"):
        frame = lake.read(table, day)
        old = frame.drop([c for c in ("cached_prompt_tokens", "billed_cached_prompt_tokens") if c in frame.columns])
        assert old.width < frame.width
        old.write_parquet(lake.warehouse / table / f"ds={day}" / "data.parquet")
    again = lake.materialize(day, instance, selection=dg.AssetSelection.assets("scored_conversations"))
    assert again.success
    assert lake.read("scored_conversations", day).drop("scored_at", "scoring_run_id").equals(expected)


def test_each_day_compares_its_models_as_the_compare_command_does(built: Built) -> None:
    from faithfulness_pipeline.core.compare import compare_segments

    lake = built.lake
    compared = 0
    for day in DAYS:
        table = lake.read("daily_model_comparison", day)
        scored = lake.read("scored_conversations", day)
        if scored.get_column("model").n_unique() < 2:
            assert table.height == 0
            continue
        expected = compare_segments(scored, "model", groups=["language"])
        assert table.height == expected.height and set(table.get_column("day").cast(pl.String)) == {day}
        shared = [c for c in table.columns if c in expected.columns]
        assert_frame_equal(table.select(shared), expected.select(shared), check_dtypes=False)
        compared += 1
    assert compared  # the sample's days hold two models
    with duckdb.connect(str(lake.warehouse / "answer_quality.duckdb"), read_only=True,
                        config={"file_search_path": str(lake.warehouse)}) as con:
        rows = con.execute("SELECT count(*) FROM daily_model_comparison").fetchone()
    assert rows is not None and rows[0] == sum(lake.read("daily_model_comparison", d).height for d in DAYS)


def test_a_day_compares_each_segment_column_its_rows_carry() -> None:
    """FP_SEGMENT_COLUMNS (default app_version): where a day's rows landed with an app or prompt version, its
    versions are compared like its models; a column absent, or with one value, adds nothing."""
    import datetime as dt

    from faithfulness_pipeline.outputs.comparison import COMPARISON_SCHEMA, day_comparison
    from faithfulness_pipeline.settings.landing import WarehouseSettings

    n = 40
    rows = pl.DataFrame({
        "status": ["ok"] * n, "model": ["a", "b"] * (n // 2), "language": ["en"] * n,
        "app_version": ["v1"] * (n // 2) + ["v2"] * (n // 2),
        "hallucination_score": [0.1] * (n // 2) + [0.6] * (n // 2),
        "faithfulness_score": [0.9] * (n // 2) + [0.4] * (n // 2),
    })
    columns = WarehouseSettings().segment_columns
    assert columns == ["app_version"]
    table = day_comparison(rows, dt.date(2026, 11, 25), "model", 0.5, columns)
    assert table.schema == COMPARISON_SCHEMA
    assert set(table.get_column("segment")) == {"model=b vs a", "app_version=v2 vs v1"}
    version = table.filter((pl.col("segment") == "app_version=v2 vs v1") & (pl.col("group_by") == "all"),
                           pl.col("score") == "hallucination").row(0, named=True)
    assert version["difference"] == pytest.approx(0.5) and version["verdict"] == "larger than noise"
    without = day_comparison(rows.drop("app_version"), dt.date(2026, 11, 25), "model", 0.5, columns)
    assert set(without.get_column("segment")) == {"model=b vs a"}
    one_version = day_comparison(rows.with_columns(pl.lit("v1").alias("app_version")), dt.date(2026, 11, 25),
                                 "model", 0.5, columns)
    assert one_version.equals(without)
