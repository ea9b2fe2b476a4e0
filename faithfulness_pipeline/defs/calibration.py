"""Calibration in Dagster: how far the judge that scores the schedule agrees with people.

labelled_conversations -> judge_calibration   (group ``judge_calibration``, job ``calibrate_judge``)

``labelled_conversations`` reads the labelled rows the calibration resource names (``FP_CALIBRATION_LABELLED``);
``judge_calibration`` scores them with the same judge resource as the daily scoring and writes the calibration
table (overall, per language and per grouping column, with bootstrap intervals). Its ``agreement_floor`` check
warns or fails (``below_floor``) when the overall balanced accuracy is below ``agreement_floor``. The scored
assets name the latest calibration of the judge that produced them (:func:`latest_calibration`). Both assets
are unpartitioned: one labelled set, re-measured after a judge or prompt change (the code version carries
both, so the UI shows the calibration stale).
"""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import polars as pl

from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.labels import LABEL_COLUMNS, check_labels
from faithfulness_pipeline.defs.resources import (
    CalibrationResource,
    JudgeResource,
    ScoringResource,
    WarehouseResource,
)
from faithfulness_pipeline.tables.read import read_all

GROUP = "judge_calibration"
JOB = "calibrate_judge"
LABELLED = "labelled_conversations"
CALIBRATION = "judge_calibration"
AGREEMENT_FLOOR = "agreement_floor"

_LABELLED_REVISION = "labelled-1"
_CALIBRATION_REVISION = "calibration-1"


def _interval(row: dict[str, Any], name: str) -> str:
    low, high = row.get(f"{name}_low"), row.get(f"{name}_high")
    return "-" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


def build_calibration_assets(judge_version: str, pool: str) -> list[dg.AssetsDefinition]:
    """The two assets; ``judge_version`` ("model:prompt version") goes into the calibration's code version."""
    return [_labelled_asset(), _calibration_asset(judge_version, pool)]


def _labelled_asset() -> dg.AssetsDefinition:
    """The labelled rows, read as configured and checked."""

    @dg.asset(
        name=LABELLED,
        group_name=GROUP,
        code_version=_LABELLED_REVISION,
        kinds={"parquet", "polars"},
        description="Labelled rows (people's judgments): the row key columns, label_hallucinated and/or "
        "label_faithfulness, the answer and context to score, and grouping columns such as language or source.",
    )
    def labelled_conversations(calibration: CalibrationResource) -> dg.Output[pl.DataFrame]:
        if not calibration.labelled:
            raise ConfigError(
                "no labelled rows configured: set FP_CALIBRATION_LABELLED (calibration.labelled) to a Parquet "
                "file, folder or glob of labelled rows"
            )
        frame = read_all(calibration.labelled)
        check_labels(frame)
        meta: dict[str, Any] = {
            "labelled": calibration.labelled,
            "label_columns": ", ".join(c for c in LABEL_COLUMNS if c in frame.columns),
        }
        if "label_hallucinated" in frame.columns:
            meta["hallucinated_rows"] = int(frame.get_column("label_hallucinated").sum() or 0)
        if "language" in frame.columns:
            counts = frame.group_by("language").len().sort("language").rows()
            meta["rows_per_language"] = ", ".join(f"{lang}: {n}" for lang, n in counts)
        return dg.Output(frame, metadata=meta)

    return labelled_conversations


def _calibration_asset(judge_version: str, pool: str) -> dg.AssetsDefinition:
    """The judge's agreement with the labelled rows, and its check against the agreement floor."""

    @dg.asset(
        name=CALIBRATION,
        group_name=GROUP,
        code_version=f"{_CALIBRATION_REVISION}:{judge_version}",
        kinds={"parquet", "polars"},
        pool=pool,
        check_specs=[dg.AssetCheckSpec(
            AGREEMENT_FLOOR, asset=CALIBRATION,
            description="The judge's overall balanced accuracy on the labelled rows is at least the calibration "
            "resource's agreement_floor (below it: WARN, or ERROR with below_floor = fail).",
        )],
        description="How far the scoring judge agrees with the labelled rows, per judge model x prompt version: "
        "overall, per language and per grouping column — n, balanced accuracy, Cohen's kappa, precision / "
        "recall / F1 for hallucinated, ROC-AUC of both scores, the confusion matrix, the best threshold, and "
        "95 % bootstrap intervals.",
    )
    def judge_calibration(
        labelled_conversations: pl.DataFrame,
        judge: JudgeResource,
        scoring: ScoringResource,
        calibration: CalibrationResource,
        warehouse: WarehouseResource,
    ) -> Iterator[dg.Output[pl.DataFrame] | dg.AssetCheckResult]:
        # Imported here: the calibration statistics load only for a calibration, not with the code location.
        from faithfulness_pipeline.api.calibration import read_claim_labels, run
        from faithfulness_pipeline.core.calibration import calibration_markdown, overall

        made = judge.make(warehouse.judge_store(), remote_warehouse=warehouse.place().remote)
        scored = score_frame(labelled_conversations, made, scoring.config())
        result = run(labelled_conversations, [(made.model_name, scored)], scoring, calibration,
                     claim_labels=read_claim_labels(calibration))
        head = overall(result.table).row(0, named=True)
        ba = head["balanced_accuracy"]
        meta: dict[str, Any] = {
            "judge_model": made.model_name,
            "prompt_version": made.prompt_version,
            "labelled_rows": result.labelled_rows,
            "balanced_accuracy": dg.MetadataValue.float(ba) if ba is not None else "not measurable",
            "balanced_accuracy_95": _interval(head, "balanced_accuracy"),
            "kappa": dg.MetadataValue.float(head["kappa"]) if head["kappa"] is not None else "not measurable",
            "calibration": dg.MetadataValue.md(calibration_markdown(result.table)),
        }
        if result.skipped_groups:
            meta["skipped_group_columns"] = ", ".join(result.skipped_groups)
        yield dg.Output(result.table, metadata=meta)
        severity = dg.AssetCheckSeverity.WARN if calibration.below_floor == "warn" else dg.AssetCheckSeverity.ERROR
        yield dg.AssetCheckResult(
            asset_key=CALIBRATION,
            check_name=AGREEMENT_FLOOR,
            passed=not result.problems,
            severity=severity,
            metadata={"agreement_floor": calibration.agreement_floor, "balanced_accuracy_95": meta[
                "balanced_accuracy_95"], "judge_model": made.model_name},
            description="; ".join(result.problems) or None,
        )

    return judge_calibration

def build_calibration_job() -> Any:
    return dg.define_asset_job(
        JOB,
        selection=dg.AssetSelection.groups(GROUP),
        description="Score the labelled rows with the scoring judge and measure its agreement with people.",
    )


def latest_calibration(instance: dg.DagsterInstance, judge_model: str, prompt_version: str) -> str:
    """One line naming the latest calibration of this judge, for a scored asset's metadata."""
    event = instance.get_latest_materialization_event(dg.AssetKey(CALIBRATION))
    materialization = event.asset_materialization if event is not None else None
    if materialization is None:
        return f"none: materialise {CALIBRATION} (job {JOB}) to measure this judge against labelled rows"
    meta = {k: v.value for k, v in materialization.metadata.items()}
    model, prompt = meta.get("judge_model"), meta.get("prompt_version")
    if (model, prompt) != (judge_model, prompt_version):
        return (f"none for {judge_model} ({prompt_version}): the latest {CALIBRATION} measured {model} ({prompt}); "
                f"materialise it again with this judge")
    ba = meta.get("balanced_accuracy")
    ba_text = f"{ba:.3f} {meta.get('balanced_accuracy_95', '')}" if isinstance(ba, float) else str(ba)
    when = datetime.fromtimestamp(event.timestamp, UTC).strftime("%Y-%m-%d %H:%M UTC") if event else "?"
    return (f"{CALIBRATION} of {when} (run {event.run_id[:8] if event else '?'}): balanced accuracy {ba_text} "
            f"on {meta.get('labelled_rows')} labelled rows")
