"""The outputs of a scoring, declared once (``outputs.catalog``) and made alike by every entry point."""

from faithfulness_pipeline.outputs.catalog import OUTPUTS, TABLE_DESCRIPTIONS, describe, output, tables
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

__all__ = ["OUTPUTS", "TABLE_DESCRIPTIONS", "ChunkLines", "ChunkTable", "DayTable", "Delivered", "Output",
           "OutputContext", "Sent", "TableOutput", "describe", "output", "tables"]
