"""The settings of people's review of the judge (``FP_REVIEW_*``, the Dagster ``review`` resource): how large
the audit sample they label is (docs/review.md)."""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, Field

from faithfulness_pipeline.settings.model_config import SETTINGS_CONFIG

#: Rows of an audit sample unless set: a day's review a person can finish.
REVIEW_SAMPLE_SIZE: Final = 100


class ReviewSettings(BaseModel):
    """The review settings: declared once here; the flag (``score --review-sample-size``, which ``review sample``
    also takes as ``--size``), the variable and the Dagster ``review`` resource field are derived
    (``faithfulness_pipeline.settings.derive``)."""

    model_config = SETTINGS_CONFIG

    review_sample_size: int = Field(
        default=REVIEW_SAMPLE_SIZE, ge=1,
        description="rows of the audit sample people label (docs/review.md), shared out over the strata (day x "
        "model x language) with at least 2 each: a Dagster day's review_queue, or all the rows of "
        "score --review-out and review sample",
    )
