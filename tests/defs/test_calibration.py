"""The calibration assets in Dagster: labelled rows -> judge_calibration with its agreement check, the scored
assets naming the latest calibration of their judge, and the WARN when the offline baseline scored a day."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from faithfulness_pipeline.defs import DefsSettings, build_defs
from faithfulness_pipeline.defs.calibration import latest_calibration
from faithfulness_pipeline.defs.resources import CalibrationResource, LandingResource, WarehouseResource
from tests.defs.conftest import REPO

LABELLED = REPO / "sample_labelled" / "conversations_labelled.parquet"
DEV = REPO.parent / "shared" / "datasets" / "dev" / "conversations_labeled.parquet"
DAY = "2026-11-25"


def _defs(tmp_path: Path, labelled: Path | None, **calibration: object) -> dg.Definitions:
    return build_defs(DefsSettings(
        landing=LandingResource(path=str(REPO / "sample_data")),
        warehouse=WarehouseResource(root=str(tmp_path / "warehouse")),
        calibration=CalibrationResource(labelled=str(labelled) if labelled else None, bootstrap=200,
                                        **calibration),  # type: ignore[arg-type]
    ))


def _run_job(defs: dg.Definitions, name: str, instance: dg.DagsterInstance,
             partition: str | None = None) -> dg.ExecuteInProcessResult:
    return defs.resolve_job_def(name).execute_in_process(instance=instance, partition_key=partition,
                                                         raise_on_error=False)


def _checks(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def test_the_calibration_job_measures_the_judge_and_the_scored_day_names_it(
    tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    defs = _defs(tmp_path, LABELLED)
    # before any calibration the scored table says there is none
    first = _run_job(defs, "score_conversations", instance, DAY)
    assert first.success
    scored_meta = first.asset_materializations_for_node("scored_conversations")[0].metadata
    assert scored_meta["calibration"].value.startswith("none: materialise judge_calibration")
    # the offline fallback is a WARN on the scored table, with the reason
    fallback = _checks(first)["llm_judge_used"]
    assert not fallback.passed and fallback.severity == dg.AssetCheckSeverity.WARN
    assert "offline baseline judge" in str(fallback.description)
    assert "FP_JUDGE_MODEL" in str(fallback.metadata["reason"].value)

    result = _run_job(defs, "calibrate_judge", instance)
    assert result.success
    table = pl.read_parquet(tmp_path / "warehouse" / "judge_calibration" / "data.parquet")
    overall = table.filter(pl.col("group_by") == "all").row(0, named=True)
    assert overall["n"] == 21 and overall["judge_model"] == "offline-lexical-v1"
    meta = result.asset_materializations_for_node("judge_calibration")[0].metadata
    assert meta["balanced_accuracy"].value == pytest.approx(overall["balanced_accuracy"])
    assert "| offline-lexical-v1 | offline-lexical-2 | **all** | 21 |" in meta["calibration"].value
    assert meta["balanced_accuracy_95"].value.startswith("[")
    check = _checks(result)["agreement_floor"]
    assert check.passed == (overall["balanced_accuracy"] >= 0.6)
    # lineage: labelled rows -> calibration
    graph = defs.resolve_asset_graph()
    assert dg.AssetKey("labelled_conversations") in graph.get(dg.AssetKey("judge_calibration")).parent_keys

    again = _run_job(defs, "score_conversations", instance, DAY)
    for asset in ("scored_conversations", "daily_answer_quality"):
        named = again.asset_materializations_for_node(asset)[0].metadata["calibration"].value
        assert named.startswith("judge_calibration of ") and f"{overall['balanced_accuracy']:.3f}" in named

    # a calibration of another judge is not this judge's: a day scored by another judge says so
    named = latest_calibration(instance, "openai/other-judge", "v9")
    assert named.startswith("none for openai/other-judge (v9): the latest judge_calibration measured "
                            "offline-lexical-v1")


@pytest.mark.parametrize(("below", "severity"), [("warn", dg.AssetCheckSeverity.WARN),
                                                 ("fail", dg.AssetCheckSeverity.ERROR)])
def test_agreement_below_the_floor_warns_or_fails_as_configured(
    tmp_path: Path, instance: dg.DagsterInstance, below: str, severity: dg.AssetCheckSeverity
) -> None:
    result = _run_job(_defs(tmp_path, LABELLED, agreement_floor=0.99, below_floor=below), "calibrate_judge", instance)
    check = _checks(result)["agreement_floor"]
    assert not check.passed and check.severity == severity
    assert "below the floor 0.99" in str(check.description)


def test_no_labelled_rows_configured_is_a_clear_step_failure(tmp_path: Path, instance: dg.DagsterInstance) -> None:
    result = _run_job(_defs(tmp_path, None), "calibrate_judge", instance)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "FP_CALIBRATION_LABELLED" in str(failure.step_failure_data.error)


@pytest.mark.skipif(not DEV.exists(), reason=f"the shared labelled dev set is absent ({DEV}); nothing to calibrate on")
def test_the_dev_set_calibrates_in_dagster_per_language(tmp_path: Path, instance: dg.DagsterInstance) -> None:
    result = _run_job(_defs(tmp_path, DEV), "calibrate_judge", instance)
    assert result.success
    table = pl.read_parquet(tmp_path / "warehouse" / "judge_calibration" / "data.parquet")
    languages = dict(table.filter(pl.col("group_by") == "language").select("group", "n").rows())
    assert languages == dict(pl.read_parquet(DEV, columns=["language"]).group_by("language").len().rows())
