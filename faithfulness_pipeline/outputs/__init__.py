"""The outputs of a scoring, declared once (``outputs.catalog``) and made alike by every entry point."""

from faithfulness_pipeline.outputs.catalog import describe, entries, output, table_descriptions, tables
from faithfulness_pipeline.outputs.kinds import (
    ChunkLines,
    ChunkTable,
    DayTable,
    Delivered,
    Output,
    OutputContext,
    Sent,
    TableOutput,
)

__all__ = ["ChunkLines", "ChunkTable", "DayTable", "Delivered", "Output", "OutputContext", "Sent", "TableOutput",
           "describe", "entries", "output", "table_descriptions", "tables"]
