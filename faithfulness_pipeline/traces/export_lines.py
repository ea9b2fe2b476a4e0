"""The lines of a span export, as bytes, with what one line may take bounded.

A Collector's file export is JSON Lines, plain or gzip (found by its content, whatever the name). Reading it
line by line with a cap on each line's inflated bytes keeps a run's memory bounded whatever the file holds: a
gzip of 1 MB that inflates to a line of 1 GiB is refused at the cap, naming the line, and never held whole.
A gzip cut short (a copy that stopped, a disk that filled) is refused as such, naming the file: a damaged
export is never read as a shorter one."""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.tables.storage import Place

#: The most bytes one line of an export may take once inflated. A Collector's OTLP receiver takes requests of
#: 4 MiB by default and a batch processor joins a few of them; JSON is two to three times protobuf's size. A
#: line beyond this is refused by number rather than read (a gzip bomb; a file that is no export at all).
MAX_LINE_BYTES: Final = 64 << 20
GZIP_MAGIC: Final = b"\x1f\x8b"
#: What reading a gzip that is cut or damaged raises: gzip's EOFError and BadGzipFile, zlib's error.
BROKEN_GZIP: Final = (EOFError, OSError, zlib.error)


def broken_gzip(path: str, lines: int, why: Exception) -> InputError:
    """The refusal of a gzip export that is cut or corrupt after ``lines`` whole lines."""
    return InputError(f"{path}: truncated/corrupt gzip after line {lines} ({why}): the export was cut or damaged "
                      "in copying; copy or export it again")


@contextmanager
def open_export(path: str) -> Iterator[tuple[io.BufferedIOBase, bool]]:
    """The bytes of ``path`` inflated if it is gzip (by its first bytes), and whether it was."""
    place = Place.of(path)
    # compression=None: pyarrow would otherwise inflate a *.gz itself, and its stream reads no lines.
    with place.fs.open_input_stream(place.path, compression=None) as probe:
        packed = probe.read(2) == GZIP_MAGIC
    with place.fs.open_input_stream(place.path, compression=None) as raw:
        stream: io.BufferedIOBase = gzip.GzipFile(fileobj=raw) if packed else io.BufferedReader(raw, 1 << 20)
        yield stream, packed


def export_lines(path: str, max_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes]]:
    """Each line of ``path`` with its number (from 1), blank lines left out. A line longer than ``max_bytes``
    once inflated, or a gzip that is cut or corrupt, raises :class:`InputError` naming the file (and line)."""
    with open_export(path) as (stream, packed):
        number = 0
        while True:
            try:
                # one byte past the cap tells a line of exactly max_bytes (and its newline) from a longer one
                line = stream.readline(max_bytes + 1)
            except BROKEN_GZIP as why:
                if not packed:
                    raise
                raise broken_gzip(path, number, why) from None
            if not line:
                return
            number += 1
            if len(line) > max_bytes and not (len(line) == max_bytes + 1 and line.endswith(b"\n")):
                raise InputError(f"{path}: line {number} is longer than {max_bytes} bytes (MAX_LINE_BYTES), more "
                                 "than any OTLP request a Collector writes: refused unread (split the export into "
                                 "smaller requests if it is real)")
            if not line.isspace():  # isspace, not strip: no copy of a line that may be megabytes long
                yield number, line
