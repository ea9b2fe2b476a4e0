"""FP_LABELS naming a label store in Dagster: ``answer_labels`` reads the store's labels (each reviewer's a row),
the ``new_labels`` sensor sees a label given, changed or taken back, and neither the asset's metadata nor the
sensor's cursor and messages (which Dagster keeps where everyone with the UI reads them) hold the password of
a PostgreSQL store."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import polars as pl

from faithfulness_pipeline.defs.labels import answer_labels, new_labels
from faithfulness_pipeline.defs.resources import LabelsResource, ScoringResource
from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.review.store import Label, LabelStore
from tests.postgres_cluster import PASSWORD, Cluster


def _tick(labels: LabelsResource, cursor: str | None) -> dg.SensorResult | dg.SkipReason:
    context = dg.build_sensor_context(cursor=cursor, resources={"labels": labels})
    result = new_labels(context)
    assert isinstance(result, dg.SensorResult | dg.SkipReason)
    return result


def test_answer_labels_and_the_sensor_read_a_postgresql_store_without_showing_its_password(
        postgres: Cluster, tmp_path: Path) -> None:
    postgres.psql("CREATE DATABASE labels_dagster")
    url = postgres.url(database="labels_dagster")
    store = LabelStore(url)
    store.put([Label(row_key="k1", reviewer="ana", label_hallucinated=True, inclusion_probability=0.5),
               Label(row_key="k1", reviewer="bo", label_hallucinated=False, inclusion_probability=0.5)])
    labels = LabelsResource(labels=url)

    warehouse = WarehouseResource(root=str(tmp_path / "warehouse"))
    result = dg.materialize([answer_labels], resources={"labels": labels, "scoring": ScoringResource(),
                                                        "warehouse": warehouse})
    assert result.success
    table = pl.read_parquet(warehouse.location("answer_labels", None))
    assert table.sort("reviewer").select("row_key", "reviewer", "label_hallucinated").rows() == [
        ("k1", "ana", True), ("k1", "bo", False)]
    event = result.get_asset_materialization_events()[0].materialization
    shown = json.dumps({k: str(v.value) for k, v in event.metadata.items()})
    assert PASSWORD not in shown and "labels_dagster" in shown

    first = _tick(labels, None)
    assert isinstance(first, dg.SensorResult) and first.run_requests and PASSWORD not in (first.cursor or "")
    quiet = _tick(labels, first.cursor)
    assert isinstance(quiet, dg.SkipReason) and PASSWORD not in str(quiet.skip_message)
    store.delete("k1", "bo")  # a label taken back is a change too
    again = _tick(labels, first.cursor)
    assert isinstance(again, dg.SensorResult) and again.cursor != first.cursor
    store.close()
