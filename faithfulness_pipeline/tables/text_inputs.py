"""How JSON Lines and CSV files are read so that every value arrives as the file holds it.

polars' readers infer one type per column and quietly bend what does not fit it: a JSON key given twice
keeps its first value, a column holding text on one line and a list on another becomes the list's JSON
text, an integer beyond 64 bits becomes Int128 (which no Parquet writer takes), and a CSV id ``00123``
becomes the integer 123. Each file gets a read plan once (:func:`plan`): the types its columns are read
as, after checks that refuse, naming file, line and column, what cannot be read without changing it.
"""

from __future__ import annotations

import functools
import io
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import polars as pl
import pyarrow as pa
import pyarrow.json as pa_json

from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.core.schema import dtype_holds
from faithfulness_pipeline.tables.storage import Place, StorageError, is_remote

JSON_LINES: Final = "JSON Lines"
CSV: Final = "CSV"
_UINT64_MAX: Final = 2**64 - 1
_WIDE_INTS: Final = (pl.Int128, pl.UInt128)


@dataclass(frozen=True)
class ReadPlan:
    """The column types a text file is read with: ``overrides`` beat what polars would infer."""

    schema: pl.Schema
    overrides: Mapping[str, pl.DataType]


def scan(path: str, fmt: str, overrides: Mapping[str, pl.DataType] | None = None) -> pl.LazyFrame:
    """polars' lazy scan of a text file, types inferred from every row (a late value cannot contradict a
    type guessed from the first rows)."""
    given = dict(overrides or {})
    if fmt == JSON_LINES:
        return pl.scan_ndjson(path, infer_schema_length=None, schema_overrides=given or None)
    return pl.scan_csv(path, infer_schema_length=None, schema_overrides=given or None)


def plan(path: str, fmt: str, text: frozenset[str] = frozenset()) -> ReadPlan:
    """The read plan of one JSON Lines or CSV file; ``text`` names CSV columns always read as text (the row
    key's: ids are text, ``00123`` and ``0123`` are two ids). Computed once per file version."""
    return _plan(path, fmt, text, _version(path))


def _version(path: str) -> tuple[int, int] | None:
    """What tells one version of a local file from the next (a remote file is planned each time)."""
    if is_remote(path):
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


@functools.lru_cache(maxsize=256)
def _plan(path: str, fmt: str, text: frozenset[str], version: tuple[int, int] | None) -> ReadPlan:
    del version  # only part of the cache key
    if fmt == JSON_LINES:
        check_json_lines(path)
    inferred = scan(path, fmt).collect_schema()
    overrides: dict[str, pl.DataType] = {}
    wide = [name for name, dtype in inferred.items() if dtype_holds(dtype, lambda part: part in _WIDE_INTS)]
    for name in wide:
        if inferred[name] not in _WIDE_INTS:  # inside lists or structs: no type keeps them but text
            raise InputError(
                f"column {name!r} of {path!r} holds whole numbers beyond 64 bits inside {inferred[name]}: no Parquet "
                f"type holds them. Write them as strings (quoted), then score the file again."
            )
        overrides[name] = _wide_int_type(path, fmt, name)
    if fmt == CSV:
        for name in text & set(inferred):
            overrides[name] = pl.String()
        overrides.update(_lossy_integers(path, {n: d for n, d in inferred.items() if n not in overrides}))
    schema = pl.Schema({name: overrides.get(name, dtype) for name, dtype in inferred.items()})
    return ReadPlan(schema, overrides)



def _wide_int_type(path: str, fmt: str, name: str) -> pl.DataType:
    """An integer column polars reads as Int128: UInt64 when every value fits (a 64-bit hash, an order
    number), else text in a CSV (as written) and an error in JSON Lines (its numbers are numbers)."""
    try:
        bounds = scan(path, fmt).select(pl.col(name).min().alias("lo"), pl.col(name).max().alias("hi")).collect()
        lo, hi = bounds.row(0)
        bad = None if lo is None or (lo >= 0 and hi <= _UINT64_MAX) else hi if hi > _UINT64_MAX else lo
    except pl.exceptions.PolarsError:  # beyond even Int128
        bad = "a number beyond 128 bits"
    if bad is None:
        return pl.UInt64()
    if fmt == CSV:
        return pl.String()
    raise InputError(
        f"column {name!r} of {path!r} holds whole numbers no 64-bit type holds (e.g. {bad}). Write them as strings "
        f"(quoted) in the file, then score it again."
    )


def _lossy_integers(path: str, inferred: Mapping[str, pl.DataType]) -> dict[str, pl.DataType]:
    """CSV columns read as integers whose text the integer does not give back (``007``, ``+7``, ``-0``): read
    as text instead, so the value passes through as written."""
    ints = [name for name, dtype in inferred.items() if dtype.is_integer()]
    if not ints:
        return {}
    raw = pl.scan_csv(path, infer_schema=False).select(ints)
    lossy = raw.select(
        (pl.col(n).cast(inferred[n], strict=False).cast(pl.String) != pl.col(n)).any().alias(n) for n in ints
    ).collect()
    return {name: pl.String() for name in ints if lossy.get_column(name).item()}


# ---------------------------------------------------------------------------------------------- JSON Lines


def check_json_lines(path: str) -> None:
    """Refuses a JSON Lines file that polars would read with values changed: a key given twice in one
    object, or a field holding a list or an object on one line and something else on another. pyarrow's
    reader (fast, strict) clears most files; when it objects, each line is parsed here to find out whether
    polars would really change a value (text and numbers in one column are read as text, unchanged) and,
    if so, which line and which field."""
    try:
        for _ in pa_json.open_json(_binary(path)):
            pass
        return
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    except (OSError, StorageError):
        return  # unreadable: the read that follows names the problem, in the same words for every format
    _check_lines(path)


def _binary(path: str) -> Any:
    return Place.of(path).open_input() if is_remote(path) else path


def _lines(path: str) -> Iterator[bytes]:
    if is_remote(path):
        with Place.of(path).open_input() as handle:
            yield from io.BufferedReader(handle)
        return
    with open(path, "rb") as handle:
        yield from handle


class _Twice(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Twice(key)
        out[key] = value
    return out


def _kind(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "text or a number"


def _walk(value: Any, field: str, seen: dict[str, tuple[str, int]], line: int, path: str) -> None:
    kind = _kind(value)
    if kind is None:
        return
    first = seen.setdefault(field, (kind, line))
    if first[0] != kind:
        raise InputError(
            f"field {field!r} of {path!r} holds {first[0]} on line {first[1]} and {kind} on line {line}: one column "
            f"holds one kind of value. Write it the same way on every line (a context of one passage: a list of "
            f"one string), then score the file again."
        )
    if isinstance(value, dict):
        for key, item in value.items():
            _walk(item, f"{field}.{key}", seen, line, path)
    elif isinstance(value, list):
        for item in value:
            _walk(item, f"{field}[]", seen, line, path)


def _check_lines(path: str) -> None:
    seen: dict[str, tuple[str, int]] = {}
    for number, raw in enumerate(_lines(path), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw, object_pairs_hook=_no_repeats)
        except _Twice as twice:
            raise InputError(
                f"line {number} of {path!r} gives the key {twice.key!r} twice: which value is meant cannot be told. "
                f"Keep one of them, then score the file again."
            ) from None
        except ValueError:
            return  # not JSON (or not UTF-8): polars' read names it, as for every format
        if isinstance(row, dict):
            for key, value in row.items():
                _walk(value, key, seen, number, path)
