"""The one place an entry point asks for a source: by what the user named, told apart by what it is. Text or
a path names a Phoenix project when it starts with ``phoenix+http://`` or ``phoenix+https://``, else files (a
file, a folder, a glob, local or an object-store URI), span exports among them staged.

A new kind of input is one branch here and a module beside this one that builds its :class:`Source`.
"""

from __future__ import annotations

import os

from faithfulness_pipeline.sources.files import files_source
from faithfulness_pipeline.sources.phoenix import is_phoenix, phoenix_source
from faithfulness_pipeline.sources.source import Part, Source


def open_source(named: str | os.PathLike[str], *, rows: int, text: frozenset[str] = frozenset(),
                workdir: str | None = None, phoenix_api_key: str | None = None) -> Source[Part]:
    """The source ``named`` names, read in chunks of at most ``rows`` rows. ``text``: CSV columns of files
    read as text (the row key's); ``workdir``: where a source that stages tables makes its working folder
    (the system's temporary folder when None); ``phoenix_api_key``: for a Phoenix project that needs one.
    Everything that can be refused before a row is read is refused here (a file that does not exist, a
    damaged span export, a Phoenix project that cannot be reached)."""
    spec = os.fspath(named)
    if is_phoenix(spec):
        return phoenix_source(spec, rows, text, workdir, phoenix_api_key)
    return files_source(spec, rows, text, workdir)
