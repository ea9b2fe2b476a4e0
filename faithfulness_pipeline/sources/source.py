"""A source: what a run reads, whatever the user named (``sources.open``).

A source is a list of parts, each read on its own (a file, a frame, one landing file's rows of a day), so
parts may differ in their columns (``core.combine`` unites them). It yields polars chunks of at most the
number of rows it was opened with, part after part, anew at each call; it says what the spans it was made
of held, and which files it reads. A source that staged tables (span exports, a Phoenix project) keeps them
in a working folder of its own, removed when it closes: open it in a ``with`` block.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Generic, Protocol, TypeVar

import polars as pl

from faithfulness_pipeline.traces.conversations import SpanCount
from faithfulness_pipeline.traces.staging import staging_folder


class Part(Protocol):
    """One part of a source, read on its own."""

    @property
    def name(self) -> str:
        """The file's path (an object's URI), or what stands for a frame in messages."""
        ...

    def schema(self) -> pl.Schema:
        """The part's columns, checked as reading it would check them, before a row is read."""
        ...

    def chunks(self) -> Iterator[pl.DataFrame]:
        """The part's rows in chunks, a new pass at each call."""
        ...

    def row_count(self) -> int | None:
        """How many rows :meth:`chunks` gives, or None where only reading them would tell."""
        ...


P = TypeVar("P", bound=Part, covariant=True)


def working_folder(parent: str | None) -> tempfile.TemporaryDirectory[str]:
    """A folder for the tables a source stages, under ``parent`` (the system's temporary folder when None);
    those of runs that died (SIGKILL) are swept first (``traces.staging.staging_folder``)."""
    return staging_folder(parent)


class Source(Generic[P]):
    """What a run reads: ``parts`` in order; ``files``: every file it reads (the span exports its
    conversation tables were staged from too); ``spans``: what those spans held (None when it was made of
    no spans); ``work``: its working folder, if it staged anything."""

    def __init__(self, parts: Iterable[P], *, files: Iterable[str] = (), spans: SpanCount | None = None,
                 work: tempfile.TemporaryDirectory[str] | None = None) -> None:
        self._parts = tuple(parts)
        self._files = list(files)
        self._spans = spans
        self._work = work

    @property
    def parts(self) -> tuple[P, ...]:
        return self._parts

    @property
    def files(self) -> list[str]:
        return list(self._files)

    @property
    def spans(self) -> SpanCount | None:
        return self._spans

    @property
    def notes(self) -> list[str]:
        """What the source says about its input in a run's summary (what the spans held)."""
        return [] if self._spans is None else self._spans.lines()

    def chunks(self) -> Iterator[pl.DataFrame]:
        """Every part's chunks, part after part; a chunk never spans two parts. Each call is a new pass."""
        for part in self._parts:
            yield from part.chunks()

    def row_count(self) -> int | None:
        """How many rows :meth:`chunks` gives, or None when a part cannot tell without reading them."""
        total = 0
        for part in self._parts:
            rows = part.row_count()
            if rows is None:
                return None
            total += rows
        return total

    def close(self) -> None:
        """Removes the working folder, if there is one (closing twice does nothing more)."""
        if self._work is not None:
            self._work.cleanup()

    def __enter__(self) -> Source[P]:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()
