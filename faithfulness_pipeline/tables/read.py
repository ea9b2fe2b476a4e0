"""Reading input tables in bounded chunks.

Which files an input names, and their formats, is ``tables.inputs``'s (local or an object-store URI,
``tables.storage``). Each file is read on its own, so files may differ in their columns (``core.combine`` unites them).
Parquet is read through pyarrow's filesystems (footers, row groups: only what is needed), JSON Lines and CSV
through polars' scans, which read object-store URIs themselves (same environment and profile chain).
Outputs are written by ``tables.write``.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Final

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from faithfulness_pipeline.core.combine import conform, union_schema
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.tables.inputs import PARQUET, input_format, is_uri, resolve_inputs
from faithfulness_pipeline.tables.storage import Place, StorageError, is_remote
from faithfulness_pipeline.tables.text_inputs import ReadPlan, plan, scan

#: What the readers raise for a file that is not what its suffix says (or is cut short).
READ_ERRORS: Final = (pa.ArrowInvalid, OSError, pl.exceptions.PolarsError)


def read_error(path: str, exc: BaseException) -> InputError:
    """One line for an unreadable input file, the same for every format."""
    fmt = input_format(path)
    detail = " ".join(str(exc).split()).rstrip(". ")  # the reader's own sentence may end with a period
    return InputError(f"cannot read {path!r} as {fmt}: {detail}. Is the file complete and really {fmt}?")


def _open(path: str) -> pq.ParquetFile:
    try:
        if is_uri(path):
            return pq.ParquetFile(Place.of(path).open_input())
        return pq.ParquetFile(path)
    except StorageError as exc:
        raise InputError(str(exc)) from None
    except READ_ERRORS as exc:
        raise read_error(path, exc) from exc


def scan_input(path: str, text: frozenset[str] = frozenset()) -> pl.LazyFrame:
    """A lazy frame over one input file, in the format its suffix names. Text formats are read by their
    plan (``tables.text_inputs``): types inferred from every row, and values never bent to fit them; ``text``
    names CSV columns read as text (the row key's)."""
    fmt = input_format(path)
    if fmt == PARQUET:
        return pl.scan_parquet(path)
    return scan(path, fmt, _plan(path, fmt, text).overrides)


def _plan(path: str, fmt: str, text: frozenset[str]) -> ReadPlan:
    try:
        return plan(path, fmt, text)
    except READ_ERRORS as exc:
        raise read_error(path, exc) from exc


def duplicate_columns(names: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    twice: set[str] = set()
    for name in names:
        (twice if name in seen else seen).add(name)
    return sorted(twice)


def parquet_schema(path: str) -> pa.Schema:
    """The arrow schema of one Parquet file from its footer; a name given to two columns is refused (no
    table, polars' or the scored one, can hold both)."""
    schema = _open(path).schema_arrow
    twice = duplicate_columns(schema.names)
    if twice:
        raise InputError(
            f"{path!r} has two columns named {', '.join(map(repr, twice))}: a column's name must say which one it "
            f"is. Rename or drop one of them (pyarrow: table.rename_columns), then run again."
        )
    return schema


def file_schema(path: str, text: frozenset[str] = frozenset()) -> pl.Schema:
    """The columns of one input file (Parquet: from its footer; text formats: inferred, and checked that
    they read every value unchanged)."""
    fmt = input_format(path)
    if fmt == PARQUET:
        return pl.Schema(parquet_schema(path))
    if _empty(path):
        raise InputError(f"{path!r} is empty: a {fmt} file names its columns in its rows. Remove it, or write its rows")
    return _plan(path, fmt, text).schema


def _empty(path: str) -> bool:
    if is_remote(path):
        try:
            place = Place.of(path)
            return place.is_file() and place.size() == 0
        except (StorageError, OSError):
            return False  # the read that follows names the problem
    return os.path.isfile(path) and os.path.getsize(path) == 0


def count_rows(paths: list[str], text: frozenset[str] = frozenset()) -> int:
    total = 0
    for path in paths:
        if input_format(path) == PARQUET:
            total += _open(path).metadata.num_rows
            continue
        try:
            total += int(scan_input(path, text).select(pl.len()).collect().item())
        except READ_ERRORS as exc:
            raise read_error(path, exc) from exc
    return total


def _holds_text(dtype: pa.DataType) -> bool:
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_string_view(dtype):
        return True
    if pa.types.is_struct(dtype):
        return any(_holds_text(dtype.field(i).type) for i in range(dtype.num_fields))
    value_type = getattr(dtype, "value_type", None)  # lists, maps, dictionaries
    return value_type is not None and _holds_text(value_type)


def _first_bad_row(column: pa.Array) -> int | None:
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return None
    for row, raw in enumerate(column.cast(pa.large_binary()).to_pylist()):
        try:
            if raw is not None:
                raw.decode("utf-8")
        except UnicodeDecodeError:
            return row
    return None


def check_utf8(batch: pa.RecordBatch, path: str, first_row: int) -> None:
    """Text that is not valid UTF-8 (a legacy writer's artefact) is an error naming file, column and row:
    polars would otherwise crash on it (a panic, not an error) and the judge could not read it anyway."""
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if not _holds_text(column.type):
            continue
        try:
            column.validate(full=True)
        except pa.ArrowInvalid:
            row = _first_bad_row(column)
            where = f" (first at row {first_row + row} of the file)" if row is not None else ""
            raise InputError(
                f"column {name!r} of {path!r} holds text that is not valid UTF-8{where}. Re-encode the column as "
                f"UTF-8 (e.g. decode its bytes with errors='replace'), then score the file again."
            ) from None


def parquet_batches(file: pq.ParquetFile, rows: int, columns: Sequence[str] | None = None,
                    row_groups: Sequence[int] | None = None) -> Iterator[pa.RecordBatch]:
    """The batches ``file.iter_batches(batch_size=rows, columns=columns)`` gives (``rows`` rows each, the last
    one shorter, spanning row groups), read one row group at a time; ``row_groups``: only those.

    One ``iter_batches`` reader over a whole file keeps every row group's column chunks it has read until it
    is done (pyarrow 26: memory grew by the file's compressed size, 660 MB over a million typical rows); a
    reader per row group lets each go once its rows are handed on, so a run holds one row group, never the
    file. A batch that straddles two row groups is concatenated from their pieces (a copy of at most
    ``rows`` rows)."""
    pending: list[pa.RecordBatch] = []
    held = 0
    for group in range(file.metadata.num_row_groups) if row_groups is None else row_groups:
        for batch in file.iter_batches(batch_size=rows, row_groups=[group], columns=columns):
            if not pending and batch.num_rows == rows:
                yield batch
                continue
            pending.append(batch)
            held += batch.num_rows
            while held >= rows:
                whole = pa.concat_batches(pending)
                yield whole.slice(0, rows)
                rest = whole.slice(rows)
                pending, held = ([rest] if rest.num_rows else []), rest.num_rows
    if held:
        yield pa.concat_batches(pending)


def iter_chunks(paths: list[str], chunk_rows: int, text: frozenset[str] = frozenset(),
                columns: Collection[str] | None = None) -> Iterator[pl.DataFrame]:
    """Input rows as polars frames of at most ``chunk_rows`` rows, file by file, in file order; a chunk never
    spans two files (``text``: as for :func:`scan_input`; ``columns``: only those of them each file has, the
    others left unread)."""
    for path in paths:
        try:
            if input_format(path) == PARQUET:
                done = 0
                names = parquet_schema(path).names
                kept = None if columns is None else [c for c in names if c in columns]
                for batch in parquet_batches(_open(path), chunk_rows, kept):
                    check_utf8(batch, path, done)
                    done += batch.num_rows
                    frame = pl.from_arrow(batch)
                    assert isinstance(frame, pl.DataFrame)
                    yield frame
            else:
                lazy = scan_input(path, text)
                if columns is not None:
                    lazy = lazy.select([c for c in lazy.collect_schema().names() if c in columns])
                yield from lazy.collect_batches(chunk_size=chunk_rows)
        except InputError:
            raise
        except READ_ERRORS as exc:
            raise read_error(path, exc) from exc


def rechunked(frames: Iterable[pl.DataFrame], rows: int) -> Iterator[pl.DataFrame]:
    """``frames`` as chunks of exactly ``rows`` rows (the last one shorter): files of the same rows written in
    other chunks can then be read side by side, chunk for chunk."""
    pending: list[pl.DataFrame] = []
    held = 0
    for frame in frames:
        pending.append(frame)
        held += frame.height
        while held >= rows:
            whole = pl.concat(pending, how="vertical")
            yield whole.slice(0, rows)
            rest = whole.slice(rows)
            pending, held = ([rest] if rest.height else []), rest.height
    if held:
        yield pl.concat(pending, how="vertical")


#: Rows decoded at a time by :func:`read_all`: a chunk's strings exist as text until they are cast, so its
#: transient memory follows the chunk, not the table.
_READ_ROWS: Final = 100_000


def read_all(spec: str, text: frozenset[str] = frozenset(), columns: Collection[str] | None = None,
             categorical: Collection[str] = ()) -> pl.DataFrame:
    """Every row of an input file, folder or glob at once, as one table (a column must have one type in
    every file that has it): for small tables such as labelled rows, or for the few light ``columns`` of a
    large one (the others, such as its texts, are never read). Text columns named in ``categorical`` (a
    model, a language, a status: a few values over millions of rows) are held as categoricals, chunk by
    chunk, so a month's copies of "ok" take four bytes a row instead of a string each."""
    paths = resolve_inputs(spec)
    schemas = [(p, file_schema(p, text)) for p in paths]
    if columns is not None:
        schemas = [(p, pl.Schema({n: t for n, t in s.items() if n in columns})) for p, s in schemas]
    schema = pl.Schema({n: pl.Categorical() if n in categorical and t == pl.String else t
                        for n, t in union_schema(schemas).items()})
    return pl.concat([conform(chunk, schema) for chunk in iter_chunks(paths, _READ_ROWS, text, columns)],
                     how="vertical")


def read_columns(path: str, columns: Sequence[str], text: frozenset[str] = frozenset()) -> pl.DataFrame:
    """Only ``columns`` of one input file, the others left unread (a Parquet file's other column chunks are
    never fetched): the light columns of a table whose texts are large (``text``: as for :func:`scan_input`)."""
    try:
        if input_format(path) == PARQUET:
            parquet_schema(path)
            frame = pl.from_arrow(_open(path).read(columns=list(columns)))
            assert isinstance(frame, pl.DataFrame)
            return frame
        return scan_input(path, text).select(columns).collect()
    except InputError:
        raise
    except READ_ERRORS as exc:
        raise read_error(path, exc) from exc
