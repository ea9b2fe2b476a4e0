"""The calibration settings (``calibrate``'s flags, ``FP_CALIBRATION_*``, the Dagster ``calibration`` resource)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from faithfulness_pipeline.settings.fields import flag
from faithfulness_pipeline.settings.model_config import SETTINGS_CONFIG


class CalibrationSettings(BaseModel):
    """The calibration settings: declared once here; the CLI flags of ``calibrate``, the ``FP_CALIBRATION_*``
    variables and the Dagster ``calibration`` resource fields are derived
    (``faithfulness_pipeline.settings.derive``)."""

    model_config = SETTINGS_CONFIG

    claim_labelled: str | None = Field(
        default=None, description="optional per-claim labels (Parquet file, folder or glob): the row key columns, "
        "claim and label_verdict (supported, contradicted or unsupported)",
    )
    labelled: str | None = Field(
        default=None, description="labelled rows (Parquet file, folder or glob) with label_hallucinated and/or "
        "label_faithfulness; in Dagster the labelled_conversations asset reads it",
        json_schema_extra=flag("--labelled"),
    )
    group_columns: str = Field(
        default="language,source,model", description="columns reported group by group besides overall "
        "(comma-separated; columns the labelled rows lack are skipped and named in the output)",
    )
    bootstrap: int = Field(default=1000, ge=0, description="bootstrap resamples for the 95 % intervals (0: none)")
    bootstrap_seed: int = Field(default=0, description="seed of the bootstrap resamples (same seed, same intervals)")
    agreement_floor: float = Field(
        default=0.6, ge=0, le=1, allow_inf_nan=False,
        description="overall balanced accuracy below which the judge_calibration check (Dagster) and "
        "calibrate's exit status report the judge",
    )
    below_floor: Literal["warn", "fail"] = Field(
        default="warn", description="agreement below the floor: a WARN check result, or a failed (ERROR) check "
        "and exit status 1 from calibrate",
    )

    def groups(self) -> tuple[str, ...]:
        return tuple(c.strip() for c in self.group_columns.split(",") if c.strip())
