"""The day's corrected figures in Dagster: people's labels read into the warehouse (answer_labels), each day x
model x language group corrected by its own labels or by its pool's over the label window, checks that say
which groups borrowed, and new labels that make the corrected days stale."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from faithfulness_pipeline.defs.resources import LabelsResource
from tests.defs.conftest import Lake, make_lake

FIRST, SECOND = "2026-11-25", "2026-11-26"


def _labels(lake: Lake, path: Path, day: str) -> pl.DataFrame:
    """Every scored answer of ``day`` labelled (a census): hallucinated when its id's last digit is odd."""
    keys = lake.read("scored_conversations", day).select("row_key", "conversation_id", "status")
    ok = keys.filter(pl.col("status") == "ok")
    labels = ok.select("conversation_id", (pl.col("conversation_id").str.slice(-1).cast(pl.Int32) % 2 == 1)
                       .alias("label_hallucinated"), pl.lit("ana").alias("reviewer"))
    labels.write_parquet(path)
    return ok.join(labels, on="conversation_id")


def _read_labels(lake: Lake, instance: dg.DagsterInstance) -> None:
    """The read_labels job's one asset, as the new_labels sensor runs it."""
    labels = [a for a in lake.defs.assets or [] if isinstance(a, dg.AssetsDefinition)
              and dg.AssetKey("answer_labels") in a.keys]
    assert dg.materialize(labels, instance=instance, resources=lake.defs.resources).success


def _checks(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations()
            if e.asset_key.to_user_string() == "daily_corrected_quality"}


def test_labels_correct_their_day_and_lend_to_the_next(landing: Path, tmp_path: Path,
                                                        instance: dg.DagsterInstance) -> None:
    unlabelled = make_lake(landing, tmp_path / "warehouse")
    assert unlabelled.materialize(FIRST, instance).success
    empty = unlabelled.read("daily_corrected_quality", FIRST)
    assert empty.height > 0 and set(empty.get_column("labels_from")) == {"none"}
    assert empty.get_column("over_threshold_share_corrected").null_count() == empty.height
    assert 'id="no-corrected"' in (tmp_path / "warehouse" / "answer_quality_report.html").read_text(encoding="utf-8")

    path = tmp_path / "labels.parquet"
    truth = _labels(unlabelled, path, FIRST)
    lake = make_lake(landing, tmp_path / "warehouse", LabelsResource(labels=str(path), min_labels=2))
    _read_labels(lake, instance)
    first = lake.materialize(FIRST, instance)
    assert first.success
    table = lake.read("daily_corrected_quality", FIRST)
    scored = lake.read("scored_conversations", FIRST).join(truth.select("row_key", "label_hallucinated"),
                                                           on="row_key")
    own = 0
    for row in table.iter_rows(named=True):
        group = scored.filter((pl.col("model") == row["model"]) & (pl.col("language") == row["language"]))
        assert row["labelled_answers"] == group.height  # every answer of the day is labelled
        if row["labels_from"] != "group":  # a group of one answer: below min_labels, it borrows
            assert group.height < 2 and row["labels_from"] in ("pooled", "none")
            continue
        own += 1
        # a census: the corrected share is the people's share, known without doubt
        assert row["over_threshold_share_corrected"] == pytest.approx(group.get_column("label_hallucinated").mean())
        assert row["over_threshold_share_corrected_low"] == pytest.approx(row["over_threshold_share_corrected"])
    assert own >= 2
    page = (tmp_path / "warehouse" / "answer_quality_report.html").read_text(encoding="utf-8")
    assert 'id="corrected"' in page and page.count("<td>group</td>") == own  # the report shows them

    second = lake.materialize(SECOND, instance)
    assert second.success
    borrowed = lake.read("daily_corrected_quality", SECOND)
    assert set(borrowed.get_column("labels_from")) <= {"pooled", "none"} and "pooled" in set(
        borrowed.get_column("labels_from"))
    assert borrowed.filter(pl.col("labels_from") == "pooled").get_column("over_threshold_share_corrected") \
        .null_count() == 0
    cover = _checks(second)["labels_cover_the_groups"]
    assert not cover.passed and cover.severity == dg.AssetCheckSeverity.WARN


def test_new_labels_make_the_corrected_days_stale(landing: Path, tmp_path: Path,
                                                  instance: dg.DagsterInstance) -> None:
    unlabelled = make_lake(landing, tmp_path / "warehouse")
    assert unlabelled.materialize(FIRST, instance).success
    path = tmp_path / "labels.parquet"
    _labels(unlabelled, path, FIRST)
    lake = make_lake(landing, tmp_path / "warehouse", LabelsResource(labels=str(path), min_labels=2))
    _read_labels(lake, instance)
    assert lake.materialize(FIRST, instance).success
    before = _data_version(instance, "answer_labels")
    corrected = instance.get_latest_materialization_event(dg.AssetKey("daily_corrected_quality"))
    assert corrected is not None and corrected.asset_materialization is not None
    # the corrected day records which labels it was made of: Dagster compares that with the labels' version
    assert corrected.asset_materialization.tags["dagster/input_data_version/answer_labels"] == before
    pl.read_parquet(path).with_columns(~pl.col("label_hallucinated")).write_parquet(path)  # people changed their minds
    _read_labels(lake, instance)
    assert _data_version(instance, "answer_labels") != before  # what the corrected days depend on changed
    graph = lake.defs.resolve_asset_graph()
    assert dg.AssetKey("answer_labels") in graph.get(dg.AssetKey("daily_corrected_quality")).parent_keys


def _data_version(instance: dg.DagsterInstance, asset: str) -> str:
    event = instance.get_latest_materialization_event(dg.AssetKey(asset))
    assert event is not None and event.asset_materialization is not None
    return event.asset_materialization.tags["dagster/data_version"]
