"""``compare_scored``: two scorings side by side from Python (the ``compare`` command's question: is the
difference between them larger than its noise?)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.compare import CompareConfig, Comparison, compare, compare_segments
from faithfulness_pipeline.sources.frames import Table, to_polars


def compare_scored(
    baseline: Table,
    candidate: Table | None = None,
    *,
    by: str | None = None,
    baseline_group: str | None = None,
    pair_on: str | None = None,
    groups: Sequence[str] = ("language", "model"),
    threshold: float = 0.5,
    min_rows: int = 10,
) -> Comparison:
    """Compare two scored tables (polars, pandas or pyarrow; what ``score_frame`` returns), or with ``by`` the
    groups of one (each against ``baseline_group``, else the first in name order). Rows pair on the row key,
    or on ``pair_on``; unpaired when nothing pairs. ``threshold`` is the hallucination threshold in score
    units; groups with fewer than ``min_rows`` rows say "too few rows". ``Comparison.table`` has one row per
    score and group (docs/compare.md names its columns); ``flips`` the paired rows that crossed the
    threshold, worst first (none with ``by``)."""
    config = CompareConfig(threshold=threshold, min_rows=min_rows)
    if by is not None:
        if candidate is not None:
            raise ValueError("compare_scored: give a candidate table or `by` (the groups of one table), not both")
        frame = to_polars(baseline)
        table = compare_segments(frame, by, baseline=baseline_group, pair_on=pair_on,
                                 groups=[g for g in groups if g != by], config=config)
        paired = table.get_column("pairing").str.starts_with("paired").any()
        return Comparison(table, pl.DataFrame(), paired, pair_on or S.ROW_KEY, 0)
    if candidate is None:
        raise ValueError("compare_scored: give a candidate table, or `by` to compare the groups of one table")
    return compare(to_polars(baseline), to_polars(candidate), pair_on=pair_on, groups=groups, config=config)
