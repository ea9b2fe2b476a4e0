"""The one wording of a USD amount that the run summary and the dry run's estimate share."""

from __future__ import annotations

from faithfulness_pipeline.core.money import dollars


def test_an_amount_reads_in_dollars_to_four_decimals() -> None:
    assert dollars(0.0) == "$0.0000"
    assert dollars(0.00012) == "$0.0001"  # a cheap model's run costs fractions of a cent
    assert dollars(12.5) == "$12.5000"


def test_a_model_without_a_price_reads_as_unknown_not_as_free() -> None:
    assert dollars(None) == "unknown (no price for this model)"
