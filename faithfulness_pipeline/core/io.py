"""Reading Parquet inputs in bounded chunks and writing outputs atomically.

Inputs: a file, a directory (every ``*.parquet`` below it) or a glob, local or an object-store URI that
pyarrow can open. Files must agree on their schema; a disagreement is an error naming both files.
Outputs appear only when complete: a temporary file in the target directory, then ``os.replace``.
"""

from __future__ import annotations

import glob
import itertools
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from faithfulness_pipeline.core.errors import InputError

# Distinguishes temporaries of one process (threads may write several outputs at once).
_TMP_COUNTER = itertools.count()


def _is_uri(spec: str) -> bool:
    return "://" in spec and not spec.startswith("file://")


def resolve_inputs(spec: str | os.PathLike[str]) -> list[str]:
    """The Parquet files that ``spec`` names, sorted, so runs are reproducible."""
    text = os.fspath(spec)
    if _is_uri(text):
        fs, path = pafs.FileSystem.from_uri(text)
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.Directory:
            selector = pafs.FileSelector(path, recursive=True)
            scheme = text.split("://")[0]
            infos = fs.get_file_info(selector)
            return sorted(f"{scheme}://{i.path}" for i in infos if i.path.endswith(".parquet"))
        return [text]
    text = text.removeprefix("file://")
    path = Path(text)
    if path.is_dir():
        files = sorted(str(p) for p in path.rglob("*.parquet") if p.is_file())
        if not files:
            raise InputError(f"directory {text!r} holds no *.parquet files")
        return files
    if path.is_file():
        return [str(path)]
    if glob.has_magic(text):
        files = sorted(p for p in glob.glob(text, recursive=True) if Path(p).is_file())
        if not files:
            raise InputError(f"the pattern {text!r} matches no files")
        return files
    raise InputError(f"input {text!r} does not exist (give a Parquet file, a directory or a glob)")


def _open(path: str) -> pq.ParquetFile:
    try:
        if _is_uri(path):
            fs, inner = pafs.FileSystem.from_uri(path)
            return pq.ParquetFile(fs.open_input_file(inner))
        return pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"cannot read {path!r} as Parquet: {exc}. Is the file complete and really Parquet?") from exc


def _comparable(schema: pa.Schema) -> pa.Schema:
    # polars writes large_string/large_list where other writers use string/list; both are the same column.
    return pl.DataFrame(schema=pl.Schema(schema)).to_arrow().schema if len(schema) else schema


def input_schema(paths: list[str]) -> pl.Schema:
    """The shared schema of all input files, or an error naming the first pair that disagrees."""
    first: pa.Schema | None = None
    for path in paths:
        schema = _open(path).schema_arrow
        if first is None:
            first = schema
            first_path = path
            continue
        if _comparable(schema) != _comparable(first):
            a, b = dict(zip(first.names, first.types, strict=True)), dict(zip(schema.names, schema.types, strict=True))
            diff = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
            raise InputError(
                f"input files disagree on their schema: {first_path!r} and {path!r} differ in columns {diff}. "
                f"Score them separately, or rewrite them to one schema."
            )
    assert first is not None
    return pl.Schema(first)


def count_rows(paths: list[str]) -> int:
    return sum(_open(p).metadata.num_rows for p in paths)


def iter_chunks(paths: list[str], chunk_rows: int) -> Iterator[pl.DataFrame]:
    """Input rows as polars frames of at most ``chunk_rows`` rows, file by file, in file order."""
    for path in paths:
        parquet = _open(path)
        try:
            for batch in parquet.iter_batches(batch_size=chunk_rows):
                frame = pl.from_arrow(batch)
                assert isinstance(frame, pl.DataFrame)
                yield frame
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(f"cannot read {path!r}: {exc}") from exc


def read_all(spec: str) -> pl.DataFrame:
    """Every row of a Parquet file, folder or glob at once (files must share one schema): for small tables
    such as labelled rows."""
    paths = resolve_inputs(spec)
    input_schema(paths)
    return pl.concat(list(iter_chunks(paths, 1_000_000)), how="vertical_relaxed")


def _process_is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        # Someone else's process (or a platform without signal 0): assume alive, leave its file be.
        return True
    return True


def _sweep_orphans(final: Path) -> None:
    """Removes temporaries of ``final`` left by processes that died mid-write (SIGKILL skips cleanup)."""
    pattern = re.compile(rf"^\.{re.escape(final.name)}\.(\d+)-\d+\..*tmp$")
    for sibling in final.parent.glob(f".{glob.escape(final.name)}.*.tmp"):
        match = pattern.match(sibling.name)
        if match and int(match.group(1)) != os.getpid() and not _process_is_alive(int(match.group(1))):
            sibling.unlink(missing_ok=True)


@contextmanager
def atomic_path(target: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """A temporary path beside ``target`` that replaces it only when the block finishes without error.

    The temporary name carries the writer's pid, so a later writer can tell an orphan (its process is gone)
    from a file another live process is still writing, and remove only the orphan.
    """
    final = Path(target)
    final.parent.mkdir(parents=True, exist_ok=True)
    _sweep_orphans(final)
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


class ParquetChunkWriter:
    """Appends polars chunks to one Parquet file, all cast to the first chunk's schema."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._writer: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None

    def write(self, frame: pl.DataFrame) -> None:
        table = frame.to_arrow()
        if self._writer is None:
            self._schema = table.schema
            self._writer = pq.ParquetWriter(self._path, self._schema, compression="zstd")
        else:
            assert self._schema is not None
            table = table.cast(self._schema)
        self._writer.write_table(table)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


@contextmanager
def open_text_atomic(target: str | os.PathLike[str]) -> Iterator[IO[str]]:
    with atomic_path(target) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        yield handle
