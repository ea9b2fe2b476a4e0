"""People's labels in the warehouse: the ``answer_labels`` asset reads the label tables (or the label store of the
review page) the ``labels`` resource names (``FP_LABELS``) into one table, in a group and job of its own
(``read_labels``: labels come when people give them, not with a day), and the ``new_labels`` sensor runs it when
they change. The corrected figures depend on it, so new labels show them stale in the UI (the asset's data
version is a digest of the labels it read). A store's URL is shown without its password (in metadata, the
sensor's cursor and its messages): Dagster keeps those where everyone with the UI reads them."""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
import hashlib
import json
from typing import TYPE_CHECKING, Final

import dagster as dg
import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.corrected import INCLUSION, REVIEWER
from faithfulness_pipeline.core.errors import FaithfulnessPipelineError
from faithfulness_pipeline.core.labels import LABEL_COLUMNS, check_labels
from faithfulness_pipeline.defs.metadata import table_metadata
from faithfulness_pipeline.defs.names import LABELS, LABELS_GROUP, LABELS_JOB, LABELS_REVISION
from faithfulness_pipeline.defs.resources import LabelsResource, ScoringResource
from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.review.labels import labels_stamp, read_labels
from faithfulness_pipeline.review.store import is_store, shown
from faithfulness_pipeline.tables.inputs import resolve_inputs
from faithfulness_pipeline.tables.storage import Place

if TYPE_CHECKING:
    # Dagster exports no public name for what define_asset_job returns (as in defs/schedules.py).
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

SENSOR: Final = "new_labels"
#: The columns of the labels table when no label is set: what the corrected figures read of it.
EMPTY: Final = pl.Schema({S.ROW_KEY: pl.String(), "label_hallucinated": pl.Boolean(),
                          "label_faithfulness": pl.Float64(), REVIEWER: pl.String(), INCLUSION: pl.Float64()})


def _kept(labels: pl.DataFrame, scoring: ScoringResource) -> pl.DataFrame:
    """What the warehouse keeps of a label table: the key columns, the labels, the reviewer, the inclusion
    probability (a sheet's other columns stay in the sheet)."""
    keys = (S.ROW_KEY, scoring.id_column, scoring.turn_column, *([scoring.key_column] if scoring.key_column else []))
    wanted = [c for c in dict.fromkeys((*keys, *LABEL_COLUMNS, REVIEWER, INCLUSION)) if c in labels.columns]
    return labels.select(wanted)


@dg.asset(
    name=LABELS,
    group_name=LABELS_GROUP,
    code_version=LABELS_REVISION,
    kinds={"polars"},
    description="People's labels of scored answers, read from the labels resource's tables or label store "
    "(FP_LABELS): the key columns, label_hallucinated and/or label_faithfulness, reviewer and inclusion_probability. "
    "The corrected figures depend on it (docs/corrected.md); empty when no labels are set.",
)
def answer_labels(labels: LabelsResource, scoring: ScoringResource,
                  warehouse: WarehouseResource) -> dg.MaterializeResult:  # type: ignore[type-arg]
    if labels.labels is None:
        table = pl.DataFrame(schema=EMPTY)
    else:
        table = _kept(read_labels(labels.labels, scoring.columns().key_columns()), scoring)
        check_labels(table)
    warehouse.write(LABELS, None, table)
    digest = hashlib.sha256(table.write_ipc(None).getvalue()).hexdigest()[:16]
    return dg.MaterializeResult(
        metadata={**table_metadata(table.schema, LABELS, table.height), "labels": shown(labels.labels or "unset"),
                  "path": dg.MetadataValue.path(warehouse.location(LABELS, None))},
        data_version=dg.DataVersion(digest),
    )


def _stamps(spec: str) -> dict[str, str]:
    """Each label file's modification time and size: what tells a changed label table; a label store's digest
    of its labels' keys and times (a file's time would miss a label written to PostgreSQL)."""
    if is_store(spec):
        return {shown(spec): labels_stamp(spec)}
    stamps = {}
    for path in resolve_inputs(spec):
        info = Place.of(path).info()
        stamps[path] = f"{info.mtime_ns}:{info.size}"
    return stamps


def build_labels_job() -> "UnresolvedAssetJobDefinition":
    return dg.define_asset_job(LABELS_JOB, selection=dg.AssetSelection.groups(LABELS_GROUP),
                               description="Reads people's labels (FP_LABELS) into answer_labels.")


@dg.sensor(name=SENSOR, job_name=LABELS_JOB, minimum_interval_seconds=60,
           description="Reads the label tables again (answer_labels) when one is new or changed; the corrected "
           "figures of the days they label then show stale.")
def new_labels(context: dg.SensorEvaluationContext, labels: LabelsResource) -> dg.SensorResult | dg.SkipReason:
    if labels.labels is None:
        return dg.SkipReason("no labels are set (FP_LABELS)")
    try:
        stamps = _stamps(labels.labels)
    except FaithfulnessPipelineError as exc:  # said where the UI shows it; the next tick looks again
        return dg.SkipReason(f"the labels cannot be listed: {exc}")
    if json.loads(context.cursor or "{}") == stamps:
        return dg.SkipReason(f"no new or changed labels in {shown(labels.labels)}")
    key = hashlib.sha256(json.dumps(stamps, sort_keys=True).encode()).hexdigest()[:16]
    return dg.SensorResult(run_requests=[dg.RunRequest(run_key=key, tags={"faithfulness/trigger": SENSOR})],
                           cursor=json.dumps(stamps, sort_keys=True))
