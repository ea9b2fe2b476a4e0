"""The one place an entry point asks for a source: by what the user named, told apart by what it is.

- a :class:`~faithfulness_pipeline.sources.landing.LandingDay`: the landing location's rows of one day, from its
  files, or from a Delta, Iceberg or PostgreSQL table with the day's filter pushed down
  (``sources.table_landing``);
- text or a path: a Phoenix project when it starts with ``phoenix+http://`` or ``phoenix+https://``, else
  files (a file, a folder, a glob, local or an object-store URI), span exports among them staged;
- anything else: a table in memory (polars, pandas, arrow), a table of spans as its conversation rows.

A new kind of input is one branch here and a module beside this one that builds its :class:`Source`.
"""

from __future__ import annotations

import os
from typing import TypeAlias, overload

from faithfulness_pipeline.sources.files import files_source
from faithfulness_pipeline.sources.frames import Table, frame_source
from faithfulness_pipeline.sources.landing import DayPart, LandingDay, day_source
from faithfulness_pipeline.sources.phoenix import is_phoenix, phoenix_source
from faithfulness_pipeline.sources.source import Part, Source
from faithfulness_pipeline.sources.table_landing import TablePart, landing_kind, table_day_source

#: What a source can be asked for by: a spec or path, a landing day, or a table in memory (``Table``, which
#: is any object: a table type that is not recognised is refused when it is opened).
Named: TypeAlias = "str | os.PathLike[str] | LandingDay | Table"


@overload
def open_source(named: LandingDay, *, rows: int, text: frozenset[str] = ..., workdir: str | None = ...,
                phoenix_api_key: str | None = ...) -> Source[DayPart | TablePart]: ...


@overload
def open_source(named: Named, *, rows: int, text: frozenset[str] = ..., workdir: str | None = ...,
                phoenix_api_key: str | None = ...) -> Source[Part]: ...


def open_source(named: Named, *, rows: int, text: frozenset[str] = frozenset(), workdir: str | None = None,
                phoenix_api_key: str | None = None) -> Source[Part]:
    """The source ``named`` names, read in chunks of at most ``rows`` rows. ``text``: CSV columns of files
    read as text (the row key's); ``workdir``: where a source that stages tables makes its working folder
    (the system's temporary folder when None); ``phoenix_api_key``: for a Phoenix project that needs one.
    Everything that can be refused before a row is read is refused here (a file that does not exist, a
    damaged span export, a Phoenix project that cannot be reached)."""
    if isinstance(named, LandingDay):
        kind = landing_kind(named.location)  # a Delta, Iceberg or PostgreSQL table, else files
        return day_source(named, rows) if kind is None else table_day_source(named, kind, rows)
    if isinstance(named, str | os.PathLike):
        spec = os.fspath(named)
        if is_phoenix(spec):
            return phoenix_source(spec, rows, text, workdir, phoenix_api_key)
        return files_source(spec, rows, text, workdir)
    return frame_source(named, rows)
