"""Writing one output table: atomically, and Parquet chunk by chunk.

An output appears only when complete: a temporary file beside the target, then ``os.replace``
(:func:`atomic_path`); a writer that died midway leaves a temporary that the next writer of the same target
removes. Parquet is appended a chunk at a time (:class:`ParquetChunkWriter`), the input's own column types
kept where polars would write others (:func:`input_arrow_types`). The outputs of one run that must change
together go through ``tables.output_files``.
"""

from __future__ import annotations

import glob
import itertools
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from faithfulness_pipeline.tables.inputs import PARQUET, input_format
from faithfulness_pipeline.tables.read import file_schema, parquet_schema

# Distinguishes temporaries of one process (threads may write several outputs at once).
_TMP_COUNTER = itertools.count()


def process_is_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host still runs (someone else's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        # Someone else's process (or a platform without signal 0): assume alive, leave its file be.
        return True
    return True


def sweep_orphans(final: Path) -> None:
    """Removes temporaries of ``final`` left by processes that died mid-write (SIGKILL skips cleanup)."""
    pattern = re.compile(rf"^\.{re.escape(final.name)}\.(\d+)-\d+\..*tmp$")
    for sibling in final.parent.glob(f".{glob.escape(final.name)}.*.tmp"):
        match = pattern.match(sibling.name)
        if match and int(match.group(1)) != os.getpid() and not process_is_alive(int(match.group(1))):
            sibling.unlink(missing_ok=True)


def real_target(target: str | os.PathLike[str]) -> Path:
    """``target`` in the folder the system would put it in: its folder's ``..`` and links resolved, as opening
    it would resolve them. Only that folder is made, so ``-o nope/../x.parquet`` leaves no empty ``nope/``."""
    path = Path(target)
    return Path(os.path.realpath(path.parent)) / path.name


@contextmanager
def atomic_path(target: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """A temporary path beside ``target`` that replaces it only when the block finishes without error.

    The temporary name carries the writer's pid, so a later writer can tell an orphan (its process is gone)
    from a file another live process is still writing, and remove only the orphan.
    """
    final = real_target(target)
    final.parent.mkdir(parents=True, exist_ok=True)
    sweep_orphans(final)
    tmp = final.parent / f".{final.name}.{os.getpid()}-{next(_TMP_COUNTER)}{suffix}.tmp"
    tmp.touch(exist_ok=False)
    try:
        yield tmp
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _wide(dtype: pa.DataType) -> pa.DataType:
    """``dtype`` with the offsets polars always writes wide (large strings, binaries and lists): a column
    that differs from polars' type only in those holds the same values."""
    if pa.types.is_string(dtype):
        return pa.large_string()
    if pa.types.is_binary(dtype):
        return pa.large_binary()
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return pa.large_list(_wide(dtype.value_type))
    if pa.types.is_struct(dtype):
        return pa.struct([dtype.field(i).with_type(_wide(dtype.field(i).type)) for i in range(dtype.num_fields)])
    return dtype


def _through_polars(dtype: pa.DataType) -> pa.DataType | None:
    """The arrow type polars writes for a column it read as ``dtype`` (None: polars cannot hold it)."""
    try:
        frame = pl.from_arrow(pa.table({"c": pa.array([], dtype)}))
        assert isinstance(frame, pl.DataFrame)
        out = frame.to_arrow().schema.field(0).type
        pa.array([], out).cast(dtype)  # pyarrow can put it back
    except (pa.ArrowException, pl.exceptions.PolarsError, TypeError, ValueError):
        return None
    return out


def input_arrow_types(paths: list[str]) -> dict[str, pa.DataType]:
    """The Parquet input columns polars would write as another type (a 16-byte fixed binary as a binary, a
    time64[us] as time64[ns], a timestamp[s] as timestamp[ms]), with their input types: the scored table
    gets them back (:class:`ParquetChunkWriter`). A column whose files disagree on its arrow type, or that
    a JSON Lines or CSV file has too, keeps polars' type."""
    found: dict[str, pa.DataType] = {}
    mixed: set[str] = set()
    for path in paths:
        if input_format(path) != PARQUET:
            mixed.update(file_schema(path).names())
            continue
        for field in parquet_schema(path):
            before = found.setdefault(field.name, field.type)
            if before != field.type:
                mixed.add(field.name)
    restore = {}
    for name, dtype in found.items():
        out = _through_polars(dtype)
        if name not in mixed and out is not None and out != _wide(dtype):
            restore[name] = dtype
    return restore


class ParquetChunkWriter:
    """Appends polars chunks to one Parquet file (a path, or a stream such as ``tables.storage.Place.replace``
    gives), each chunk a row group, all cast to the first chunk's schema; ``empty`` is the schema written
    when no chunk comes (an empty table still has its columns). ``arrow_types`` are the types columns are
    written as where polars would write another (:func:`input_arrow_types`: passthrough columns keep the
    input's types)."""

    def __init__(self, sink: Path | pa.NativeFile, empty: pl.Schema | None = None,
                 arrow_types: Mapping[str, pa.DataType] | None = None) -> None:
        self._sink = sink
        self._empty = empty
        self._arrow_types = dict(arrow_types or {})
        self._writer: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None
        self.rows = 0
        #: A Parquet file keeps no versions (``tables.table_format.ChunkSink``).
        self.committed: str | None = None

    def _restored(self, table: pa.Table) -> pa.Table:
        for name, dtype in self._arrow_types.items():
            if name not in table.column_names:
                continue
            at = table.column_names.index(name)
            try:
                column = table.column(at).cast(dtype)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue  # values the input type cannot hold came in: polars' type keeps them whole
            table = table.set_column(at, table.schema.field(at).with_type(dtype), column)
        return table

    def write(self, frame: pl.DataFrame) -> None:
        table = frame.to_arrow()
        if self._writer is None:
            table = self._restored(table)
            self._schema = table.schema
            self._writer = pq.ParquetWriter(self._sink, self._schema, compression="zstd")
        else:
            assert self._schema is not None
            table = table.cast(self._schema)
        self._writer.write_table(table)
        self.rows += frame.height

    def close(self) -> None:
        if self._writer is None and self._empty is not None:
            self.write(pl.DataFrame(schema=self._empty))
        if self._writer is not None:
            self._writer.close()


@contextmanager
def open_text_atomic(target: str | os.PathLike[str]) -> Iterator[IO[str]]:
    with atomic_path(target) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        yield handle
