"""Files as a source: a file, a folder or a glob, local or an object-store URI (``tables.inputs``), each file a
part read in bounded chunks (``tables.read``: Parquet one row group at a time, JSON Lines and CSV by their
read plan). Span exports among the files (``traces.staging``) become conversation tables in the source's
working folder first, and are read as those tables."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import polars as pl

from faithfulness_pipeline.sources.source import Part, Source, working_folder
from faithfulness_pipeline.tables.inputs import resolve_inputs
from faithfulness_pipeline.tables.read import count_rows, file_schema, iter_chunks
from faithfulness_pipeline.traces.conversations import SpanCount
from faithfulness_pipeline.traces.staging import TABLE, export_kind, stage_export


@dataclass(frozen=True, slots=True)
class FilePart:
    """One table file, named by its path (or URI), read in chunks of at most ``rows`` rows; ``text`` names CSV
    columns read as text (the row key's)."""

    name: str
    rows: int
    text: frozenset[str] = frozenset()

    def schema(self) -> pl.Schema:
        return file_schema(self.name, self.text)

    def chunks(self) -> Iterator[pl.DataFrame]:
        return iter_chunks([self.name], self.rows, self.text)

    def row_count(self) -> int | None:
        return count_rows([self.name], self.text)


def files_source(spec: str | os.PathLike[str], rows: int, text: frozenset[str], workdir: str | None) -> Source[Part]:
    """The files ``spec`` names, sorted, each a part; a span export is staged as its conversation table in a
    working folder under ``workdir``, made only when there is one, and removed when the source closes (or
    at once, when staging fails)."""
    tables: list[str] = []
    exports: list[str] = []
    spans: SpanCount | None = None
    work: tempfile.TemporaryDirectory[str] | None = None
    try:
        for path in resolve_inputs(spec, compressed=True):
            kind = export_kind(path)
            if kind == TABLE:
                tables.append(path)
                continue
            work = work or working_folder(workdir)
            spans = spans or SpanCount()
            tables.append(stage_export(path, kind, work.name, spans))
            exports.append(path)
    except BaseException:
        if work is not None:
            work.cleanup()
        raise
    return Source([FilePart(path, rows, text) for path in tables], files=[*tables, *exports], spans=spans, work=work)
