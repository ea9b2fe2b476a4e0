"""The one wording of a USD amount that the run summary and the dry run's estimate share."""

from __future__ import annotations

from faithfulness_pipeline.core.money import dollars


def test_an_amount_reads_in_dollars_to_four_decimals() -> None:
    assert dollars(0.0) == "$0.0000"
    assert dollars(0.00012) == "$0.0001"  # a cheap model's run costs fractions of a cent
    assert dollars(12.5) == "$12.5000"


def test_a_model_without_a_price_reads_as_unknown_not_as_free() -> None:
    assert dollars(None) == "unknown (no price for this model)"


def test_an_amount_four_decimals_would_show_as_zero_shows_its_first_digits() -> None:
    # issue 40: a spend cap of $1e-9 read "$0.0000"
    assert dollars(1e-9) == "$0.0000000010"
    assert dollars(0.00004) == "$0.000040"
    assert dollars(0.00005) == "$0.0001"
    assert dollars(-2e-7) == "$-0.00000020"
    assert dollars(3e-15) == "$3.0e-15"
    for amount in (1e-9, 4.4e-6, 3e-15, 0.01):
        assert dollars(amount).strip("$0.") != "", amount
