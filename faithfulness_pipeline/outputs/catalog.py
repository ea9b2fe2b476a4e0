"""Every output of the pipeline, in one declared list: the one place a new output is added.

The command line offers each entry that has an option (``outputs.run_files`` writes them), the Dagster layer
makes an asset of each (``defs.outputs``), the BI database a view of each table that wants one
(``defs.duckdb_views``), the checks guard what each entry names, and the docs' table of outputs is printed
from here (``python -m faithfulness_pipeline.outputs``, which ``tests/test_outputs_catalog.py`` holds the docs
to). What an entry is: ``outputs.kinds``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from faithfulness_pipeline.outputs.claim_table import CLAIM_TABLE
from faithfulness_pipeline.outputs.comparison import COMPARISON_TABLE
from faithfulness_pipeline.outputs.corrected import CORRECTED_TABLE
from faithfulness_pipeline.outputs.daily import DAILY_TABLE
from faithfulness_pipeline.outputs.kinds import Output, TableOutput
from faithfulness_pipeline.outputs.mastra import MASTRA_EXPORT
from faithfulness_pipeline.outputs.review_queue import REVIEW_QUEUE
from faithfulness_pipeline.outputs.scored_table import COLUMNS as SCORED_COLUMNS
from faithfulness_pipeline.outputs.scored_table import SCORED_TABLE
from faithfulness_pipeline.outputs.write_back import EVALUATION_EVENTS, PHOENIX_ANNOTATIONS

#: Every output, the scored table first (the others are made of its rows).
OUTPUTS: Final[tuple[Output, ...]] = (
    SCORED_TABLE,
    CLAIM_TABLE,
    MASTRA_EXPORT,
    DAILY_TABLE,
    COMPARISON_TABLE,
    CORRECTED_TABLE,
    REVIEW_QUEUE,
    EVALUATION_EVENTS,
    PHOENIX_ANNOTATIONS,
)

#: The warehouse's table of the landed rows (no output: the judged input), described alike for BI.
RAW_TABLE: Final = "raw_conversations"
_RAW_DESCRIPTION: Final = (
    "One row per judged answer as it landed: every landing column and the row key (and, for chat rows, the "
    "answer, question and context judged). The passages live here; join by row_key and day."
)


def entries() -> tuple[Output, ...]:
    """Every entry of the list, read when asked (what derives from the list asks here, never keeps a copy)."""
    return OUTPUTS


def output(name: str) -> Output:
    """The entry named ``name``."""
    for entry in entries():
        if entry.name == name:
            return entry
    raise KeyError(f"no output named {name!r}: the outputs are {', '.join(e.name for e in entries())}")


def tables() -> tuple[TableOutput, ...]:
    """The outputs that are tables of the warehouse, in the list's order."""
    return tuple(e for e in entries() if isinstance(e, TableOutput))


def table_descriptions() -> Mapping[str, str]:
    """What each table of the warehouse holds: every output table, and the landed rows."""
    return MappingProxyType({RAW_TABLE: _RAW_DESCRIPTION, **{e.name: e.description for e in tables()}})


def describe(table: str, column: str) -> str | None:
    """What ``table.column`` holds: the output's own description, else the scored table's (a staging table of
    the same column, the landed rows); None for a column of the user's own."""
    for entry in entries():
        if entry.name == table and entry.columns:
            return entry.describe(column)
    return SCORED_COLUMNS.get(column)
