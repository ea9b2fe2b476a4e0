"""A table in memory as a source: a polars or pandas DataFrame or a pyarrow Table, every column passed
through; a table of spans (``traces.spans``: Phoenix's spans dataframe, or trace_id / span_id / name /
attributes) becomes its conversation rows, one per LLM span."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import polars as pl
import pyarrow as pa

from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.core.pipeline import chunks_of
from faithfulness_pipeline.sources.source import Part, Source
from faithfulness_pipeline.traces.conversations import spans_to_conversations
from faithfulness_pipeline.traces.staging import frame_spans

#: A table in memory: a polars DataFrame, a pyarrow Table or RecordBatch, or a pandas DataFrame (pandas is
#: optional: it is never imported here, only recognised, so it cannot be named in the type).
Table: TypeAlias = Any
#: What a frame is called where a part's name is shown.
FRAME: Final = "frame"


def to_polars(table: Table) -> pl.DataFrame:
    """``table`` as a polars DataFrame, every column kept (pandas needs ``pip install pandas``)."""
    if isinstance(table, pl.DataFrame):
        return table
    if isinstance(table, pa.Table | pa.RecordBatch):
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame
    if type(table).__module__.split(".")[0] == "pandas" and type(table).__name__ == "DataFrame":
        # The pandas index is not a column; a named index would otherwise be lost silently.
        if any(name is not None for name in table.index.names):
            table = table.reset_index()
        return pl.from_pandas(table)
    raise InputError(
        f"cannot score a {type(table).__module__}.{type(table).__name__}: give a polars or pandas DataFrame or a "
        f"pyarrow Table"
    )


@dataclass(frozen=True, slots=True)
class FramePart:
    """A frame's rows in slices of at most ``rows`` rows; an empty frame gives one empty slice, so its
    columns still reach the scored table."""

    frame: pl.DataFrame
    rows: int
    name: str = FRAME

    def schema(self) -> pl.Schema:
        return self.frame.schema

    def chunks(self) -> Iterator[pl.DataFrame]:
        return iter(chunks_of(self.frame, self.rows))

    def row_count(self) -> int | None:
        return self.frame.height


def frame_source(table: Table, rows: int) -> Source[Part]:
    """``table`` as a source of one part; a table of spans as its conversation rows, what the spans held in
    the source's ``spans``."""
    frame = to_polars(table)
    spans = frame_spans(frame)
    if spans is None:
        return Source([FramePart(frame, rows)])
    conversations, count = spans_to_conversations(spans)
    return Source([FramePart(conversations, rows)], spans=count)
