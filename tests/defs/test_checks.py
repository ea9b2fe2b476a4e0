"""Every asset check fails when its rule is broken, and says which rows (or files) and why."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import polars as pl

from faithfulness_pipeline.defs.resources import JudgeResource, ScoringResource
from faithfulness_pipeline.judging.stack import JudgeStack
from faithfulness_pipeline.testing.marker_judge import MarkerJudge
from tests.defs.conftest import SAMPLE, Built, Lake, copy_lake, make_lake

DAY = "2026-11-25"


def evaluation(result: dg.ExecuteInProcessResult, asset: str, check: str) -> dg.AssetCheckEvaluation:
    found = [
        e
        for e in result.get_asset_check_evaluations()
        if e.asset_key.to_user_string() == asset and e.check_name == check
    ]
    assert len(found) == 1, [(e.asset_key, e.check_name) for e in result.get_asset_check_evaluations()]
    return found[0]


def materialized(result: dg.ExecuteInProcessResult) -> set[str]:
    return {
        str(e.asset_key.to_user_string() if e.asset_key else None) for e in result.get_asset_materialization_events()
    }


def run_check(lake: Lake, asset: str, check: str) -> dg.AssetCheckEvaluation:
    """Runs one check alone against what is stored (as the UI's "Execute check" does)."""
    key = dg.AssetCheckKey(dg.AssetKey(asset), check)
    with dg.instance_for_test() as instance:
        # A selection of checks only has no partitions definition of its own (Dagster 1.13 refuses
        # partition_key=), so the day goes in as the run's partition tag, as the UI does it.
        result = lake.materialize(
            DAY, instance, selection=dg.AssetSelection.checks(key), tags={"dagster/partition": DAY}
        )
    assert materialized(result) == set()
    return evaluation(result, asset, check)


def rewrite(lake: Lake, table: str, change: pl.DataFrame) -> None:
    change.write_parquet(lake.warehouse / table / f"ds={DAY}" / "data.parquet")


def flat_landing(tmp_path: Path) -> Path:
    landing = tmp_path / "landing"
    landing.mkdir()
    shutil.copy(SAMPLE / "flat" / "conversations.parquet", landing / "a.parquet")
    return landing


# --------------------------------------------------------------------------- input checks (blocking)


def test_input_schema_fails_on_type_drift_between_files_and_blocks_the_llm_steps(
    tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    landing = flat_landing(tmp_path)
    drift = pl.read_parquet(landing / "a.parquet").with_columns(
        ("late-" + pl.col("conversation_id")).alias("conversation_id"), pl.lit(7).alias("model")
    )
    drift.write_parquet(landing / "b.parquet")
    lake = make_lake(landing, tmp_path / "warehouse")
    result = lake.materialize(DAY, instance)
    check = evaluation(result, "raw_conversations", "input_schema")
    assert not check.passed
    problems = str(check.metadata["problems"].value)
    assert "b.parquet" in problems and "`model`" in problems and "Int32" in problems
    assert check.description is not None and "model" in check.description
    # blocking: the raw table is stored for inspection, nothing downstream runs (no LLM money spent)
    assert materialized(result) == {"raw_conversations"}


def test_input_schema_fails_on_a_missing_required_column(tmp_path: Path, instance: dg.DagsterInstance) -> None:
    lake = make_lake(flat_landing(tmp_path), tmp_path / "warehouse", required_columns=["conversation_id", "tenant"])
    result = lake.materialize(DAY, instance)
    check = evaluation(result, "raw_conversations", "input_schema")
    assert not check.passed
    assert "a.parquet" in str(check.metadata["problems"].value) and "'tenant'" in str(check.metadata["problems"].value)
    assert materialized(result) == {"raw_conversations"}


def test_unique_keys_fails_when_a_file_is_delivered_twice(tmp_path: Path, instance: dg.DagsterInstance) -> None:
    landing = flat_landing(tmp_path)
    shutil.copy(landing / "a.parquet", landing / "a-again.parquet")
    lake = make_lake(landing, tmp_path / "warehouse")
    result = lake.materialize(DAY, instance)
    check = evaluation(result, "raw_conversations", "unique_row_keys")
    assert not check.passed
    assert check.metadata["duplicate_keys"].value == 6  # the flat sample has six conversations that day
    examples = str(check.metadata["examples"].value)
    assert "`flat-001` x2" in examples and "a.parquet" in examples and "a-again.parquet" in examples
    assert materialized(result) == {"raw_conversations"}


# --------------------------------------------------------------------------- checks on stored tables


def test_no_rows_lost_fails_when_a_stage_drops_a_row(built: Built, tmp_path: Path) -> None:
    lake = copy_lake(built.lake, tmp_path)
    assert run_check(lake, "extracted_claims", "no_rows_lost").passed  # the untouched copy passes
    rewrite(lake, "extracted_claims", lake.read("extracted_claims", DAY).filter(pl.col("row_key") != "flat-001"))
    check = run_check(lake, "extracted_claims", "no_rows_lost")
    assert not check.passed
    assert check.description is not None and "1 row(s) of the upstream table are missing" in check.description
    assert "flat-001" in check.description


def test_no_rows_lost_fails_on_a_duplicated_row(built: Built, tmp_path: Path) -> None:
    lake = copy_lake(built.lake, tmp_path)
    verdicts = lake.read("judged_claims", DAY)
    rewrite(lake, "judged_claims", pl.concat([verdicts, verdicts.head(1)]))
    check = run_check(lake, "judged_claims", "no_rows_lost")
    assert not check.passed
    assert check.description is not None and "1 row(s) repeat a key" in check.description


def test_claim_table_check_fails_when_a_claim_is_missing(built: Built, tmp_path: Path) -> None:
    lake = copy_lake(built.lake, tmp_path)
    claims = lake.read("claim_table", DAY)
    victim = claims.row(0, named=True)
    rewrite(lake, "claim_table", claims.slice(1))
    check = run_check(lake, "claim_table", "no_rows_lost")
    assert not check.passed
    assert f"`{victim['row_key']}`" in str(check.metadata["examples"].value)


def test_aggregates_check_fails_when_answers_are_miscounted(built: Built, tmp_path: Path) -> None:
    lake = copy_lake(built.lake, tmp_path)
    daily = lake.read("daily_answer_quality", DAY)
    rewrite(lake, "daily_answer_quality", daily.with_columns(pl.col("answers") - 1))
    check = run_check(lake, "daily_answer_quality", "no_rows_lost")
    assert not check.passed
    assert check.description is not None and "the scored table has 9" in check.description


def test_scores_in_range_fails_on_an_out_of_range_score_and_a_scored_error_row(built: Built, tmp_path: Path) -> None:
    lake = copy_lake(built.lake, tmp_path)
    scored = lake.read("scored_conversations", DAY)
    broken = scored.with_columns(
        pl.when(pl.col("row_key") == "flat-004")
        .then(1.5)
        .otherwise(pl.col("hallucination_score"))
        .alias("hallucination_score"),
        pl.when(pl.col("row_key") == "chat-001").then(pl.lit("error")).otherwise(pl.col("status")).alias("status"),
    )
    rewrite(lake, "scored_conversations", broken)
    check = run_check(lake, "scored_conversations", "scores_in_range")
    assert not check.passed
    examples = str(check.metadata["examples"].value)
    assert "`flat-004`: hallucination_score = 1.5 outside [0, 1]" in examples
    assert "`chat-001`: status error but hallucination_score" in examples
    # a row outside the sample has no score either
    scored_row = scored.filter(pl.col("hallucination_score").is_not_null()).get_column("row_key")[0]
    rewrite(lake, "scored_conversations", scored.with_columns(
        pl.when(pl.col("row_key") == scored_row).then(pl.lit("not_sampled")).otherwise(pl.col("status")).alias("status")))
    check = run_check(lake, "scored_conversations", "scores_in_range")
    assert not check.passed
    assert f"`{scored_row}`: status not_sampled but hallucination_score" in str(check.metadata["examples"].value)


class FailingJudge(JudgeResource):
    """The scripted test judge at the judge port: claim extraction fails for the listed row keys."""

    fail_keys: list[str] = []  # noqa: RUF012 (a pydantic field)

    def make(self, default_store: str | None = None, report: Callable[[str], None] | None = None, *,
             remote_warehouse: bool = False, receiving: Callable[[int], None] | None = None) -> JudgeStack:
        return JudgeStack(MarkerJudge(fail_extract=set(self.fail_keys)))


def test_error_rate_fails_and_names_the_failed_rows(tmp_path: Path, instance: dg.DagsterInstance) -> None:
    lake = make_lake(SAMPLE, tmp_path / "warehouse")
    judge = FailingJudge(fail_keys=["flat-001", "chat-004"])
    result = lake.materialize(DAY, instance, resources={"judge": judge})
    assert result.success  # a failed check is not a failed run; the table is there to inspect
    check = evaluation(result, "scored_conversations", "error_rate")
    assert not check.passed
    assert check.metadata["error_rows"].value == 2 and check.metadata["rows"].value == 9
    assert check.description is not None and "2 of 9 judged rows failed" in check.description
    examples = str(check.metadata["examples"].value)
    assert "`chat-004`: claim extraction failed: scripted failure" in examples and "`flat-001`" in examples
    scored = lake.read("scored_conversations", DAY)
    failed = scored.filter(pl.col("status") == "error")
    assert sorted(failed.get_column("row_key").to_list()) == ["chat-004", "flat-001"]
    assert failed.get_column("hallucination_score").null_count() == 2  # never scored 0
    # nothing was dropped on the way: the other checks pass
    assert evaluation(result, "scored_conversations", "no_rows_lost").passed
    assert evaluation(result, "scored_conversations", "scores_in_range").passed


def test_error_rate_threshold_is_configurable(tmp_path: Path, instance: dg.DagsterInstance) -> None:
    lake = make_lake(SAMPLE, tmp_path / "warehouse")
    assert lake.materialize(DAY, instance, resources={"judge": FailingJudge(fail_keys=["flat-001"])}).success
    key = dg.AssetCheckKey(dg.AssetKey("scored_conversations"), "error_rate")
    results = {
        limit: lake.materialize(
            DAY,
            instance,
            resources={"scoring": ScoringResource(max_error_rate=limit)},
            selection=dg.AssetSelection.checks(key),
            tags={"dagster/partition": DAY},
        )
        for limit in (0.05, 0.2)
    }
    strict = evaluation(results[0.05], "scored_conversations", "error_rate")
    lenient = evaluation(results[0.2], "scored_conversations", "error_rate")
    assert not strict.passed and lenient.passed  # 1 of 9 rows = 11 %
    assert lenient.metadata["error_rows"].value == 1 and lenient.metadata["max_error_rate"].value == 0.2
