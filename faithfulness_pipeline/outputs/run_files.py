"""The outputs of one command-line run: the entries its options name, written as files.

Every entry of the list that has an option (``outputs.catalog``) can be asked for; the scored table always
is. Each is written to the temporary file ``tables.output_files.committed_together`` gives it, so the run's
outputs appear together when it is complete, or not at all: the tables and lines built from each scored
chunk as the chunk comes (one pass over the run), the tables of whole days from the scored table's light
columns once its last chunk is written. What a run sends to other systems (``Sent`` entries) is sent after
its files are in place, by :func:`send_scores`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

import polars as pl
import pyarrow as pa

from faithfulness_pipeline.outputs.catalog import entries
from faithfulness_pipeline.outputs.kinds import (
    DAY,
    ChunkLines,
    ChunkTable,
    DayTable,
    Delivered,
    Output,
    OutputContext,
    Sent,
)
from faithfulness_pipeline.outputs.scored_table import SCORED_TABLE
from faithfulness_pipeline.report.data import day_of
from faithfulness_pipeline.settings.traces import TraceExportSettings
from faithfulness_pipeline.tables.write import ParquetChunkWriter


def offered() -> tuple[Output, ...]:
    """The outputs the command line offers: every entry with an option, the scored table first."""
    return tuple(e for e in entries() if e.option is not None)


def option_of(entry: Output) -> str:
    """How the command line and its messages name ``entry``'s option (``-o`` for the scored table)."""
    return entry.short_option or entry.option or entry.name


@contextmanager
def _naming(tmp: Path) -> Iterator[None]:
    """A failed write names the file it was writing (pyarrow's OSErrors name none)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(tmp)
        raise


class RunFiles:
    """Writes the chosen outputs of one run into their temporary files (``tmps``: entry -> file). The scored
    table's passthrough columns keep the input's own arrow types (``arrow_types``)."""

    def __init__(self, tmps: Mapping[Output, Path], context: OutputContext,
                 arrow_types: Mapping[str, pa.DataType] | None = None) -> None:
        if SCORED_TABLE not in tmps:
            raise ValueError("a run always writes the scored table")
        self._tmps = dict(tmps)
        self._context = context
        self._stack = ExitStack()
        self._tables = {e: ParquetChunkWriter(p, arrow_types=arrow_types if e is SCORED_TABLE else None)
                        for e, p in tmps.items() if isinstance(e, ChunkTable)}
        # The handles stay open across the run's chunks: the exit stack closes them in close().
        self._lines: dict[ChunkLines, IO[str]] = {
            e: self._stack.enter_context(open(p, "w", encoding="utf-8"))  # noqa: SIM115
            for e, p in tmps.items() if isinstance(e, ChunkLines)
        }
        self._written = False

    def write(self, scored: pl.DataFrame) -> None:
        """The outputs of one chunk of scored rows."""
        self._written = True
        for entry, writer in self._tables.items():
            with _naming(self._tmps[entry]):
                writer.write(entry.build(scored, self._context))
        for lines_entry, handle in self._lines.items():
            with _naming(self._tmps[lines_entry]):
                handle.writelines(lines_entry.lines(scored))

    def close(self, schema: pl.Schema, *, complete: bool) -> None:
        """Closes the files; a run without rows gets tables with every column of ``schema``'s scored rows. The
        tables of whole days are made when the run is ``complete`` (after a failure nothing is committed)."""
        try:
            if complete and not self._written:
                empty = pl.DataFrame(schema=schema)
                for entry, writer in self._tables.items():
                    writer.write(entry.build(empty, self._context))
        finally:
            for entry, writer in self._tables.items():
                with _naming(self._tmps[entry]):
                    writer.close()
            self._stack.close()
        if complete:
            for day_entry, tmp in self._tmps.items():
                if isinstance(day_entry, DayTable):
                    with _naming(tmp):
                        self._write_days(day_entry, tmp)

    def _write_days(self, entry: DayTable, tmp: Path) -> None:
        """A table of whole days, from the light columns of the scored table just written: a row's day is the
        date of the timestamp column in the time zone, else of ``scored_at``."""
        scan = pl.scan_parquet(self._tmps[SCORED_TABLE])
        present = scan.collect_schema().names()
        when = self._context.timestamp_column if self._context.timestamp_column in present else "scored_at"
        rows = scan.select(*dict.fromkeys([*entry.reads(present, self._context), when])).collect()
        fix = "set FP_TIMESTAMP_COLUMN to the column of the rows' times"
        dated = rows.with_columns(day_of(rows, when, self._context.timezone, fix=fix).alias(DAY))
        table = entry.build(dated, self._context) if rows.height else pl.DataFrame(schema=entry.schema(self._context))
        writer = ParquetChunkWriter(tmp)
        writer.write(table)
        writer.close()



def check_sends(columns: list[str], traces: TraceExportSettings) -> None:
    """A ConfigError when a system ``traces`` names could not be sent the scores of a scored table of
    ``columns``: before anything is paid for."""
    for entry in entries():
        if isinstance(entry, Sent) and entry.enabled(traces):
            entry.check(columns, traces)


def send_scores(scored: Callable[[], Iterable[pl.DataFrame]], traces: TraceExportSettings,
                context: OutputContext) -> list[Delivered]:
    """The run's scores sent to every system ``traces`` names, each from a fresh read of the scored rows; each
    on its own (one that fails does not keep the next from being sent), each with its outcome."""
    delivered = []
    for entry in entries():
        if isinstance(entry, Sent) and entry.enabled(traces):
            delivered.append(entry.send((c.select(entry.reads(c.columns)) for c in scored()), traces, context))
    return delivered
