"""Where people's labels are, and how the corrected figures use them (``estimate``'s flags, ``FP_LABELS`` and
the other variables, the Dagster ``labels`` resource)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from faithfulness_pipeline.core.ppi import MIN_LABELS
from faithfulness_pipeline.settings.fields import no_flag
from faithfulness_pipeline.settings.model_config import SETTINGS_CONFIG


class LabelSettings(BaseModel):
    """The labels of the corrected figures: declared once here; ``estimate``'s flags, the variables and the
    Dagster ``labels`` resource fields are derived (``faithfulness_pipeline.settings.derive``)."""

    model_config = SETTINGS_CONFIG

    labels: str | None = Field(
        default=None,
        description="people's labels of scored answers, the answers drawn at random (a Parquet, JSON Lines or CSV "
        "file, a folder or a glob; local or an object-store URI): row_key, or the id and turn columns, and "
        "label_hallucinated and/or label_faithfulness; optionally reviewer and inclusion_probability. Or the label "
        "store of the review page (a .sqlite, .sqlite3 or .db file, or a postgresql:// URL; docs/review.md). "
        "Unset: no corrected figures (docs/corrected.md)",
    )
    min_labels: int = Field(
        default=MIN_LABELS, ge=2,
        description="labelled answers a group needs of its own; with fewer it borrows the judge's error from the "
        "labels of its pool (the same judge model, prompt version and language), and says so",
    )
    label_window_days: int = Field(
        default=28, ge=1, le=366,
        description="days of scored answers (the day and those before it) whose labels a day's group with too few "
        "may borrow in Dagster (the command line pools over every day it is given)",
        json_schema_extra=no_flag(),
    )
