"""Small markdown of outputs for the Dagster UI: safe table cells and the previews entries declare."""

from __future__ import annotations

from typing import Any, Final

import polars as pl

_TEXT_LIMIT: Final = 160


def cell(text: Any, limit: int = _TEXT_LIMIT) -> str:
    """Text safe inside a markdown table cell: one line, pipes escaped, shortened."""
    value = " ".join(str(text).split())
    if len(value) > limit:
        value = value[: limit - 1] + "…"
    return value.replace("|", "\\|")


#: The headline columns of the daily aggregates' preview.
_HEADLINE: Final = ("model", "answers", "error_answers", "hallucination_mean", "hallucination_p90", "faithfulness_mean",
                    "over_threshold_share", "billed_cost_usd", "store_share", "duplicate_share")


def aggregates_md(table: pl.DataFrame) -> str:
    """The day's aggregates as a markdown table (the headline columns only)."""
    if table.is_empty():
        return "_no rows_"
    lines = ["| " + " | ".join(_HEADLINE) + " |", "|---" * len(_HEADLINE) + "|"]
    for row in table.select(_HEADLINE).iter_rows():
        cells = [f"{v:.3g}" if isinstance(v, float) else cell("-" if v is None else v, 40) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
