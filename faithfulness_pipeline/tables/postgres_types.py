"""polars dtypes as PostgreSQL column types, and back (``tables.postgres_tables``).

Flat types map to their PostgreSQL twins; a list, an array or a struct becomes ``jsonb`` (a BI tool reads it
with ``->``/``->>``), so the database does not know its inner shape. What the database cannot say, each load keeps:
the polars schema it was written with, as an Arrow schema, so a day reads back with exactly the dtypes it was
written with (a ``jsonb`` column back to its list of structs, an ``Int32`` back from ``integer``).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import polars as pl
import pyarrow as pa

#: The PostgreSQL type of each flat polars dtype (by class); nested dtypes are ``jsonb``.
_FLAT: dict[type[pl.DataType], str] = {
    pl.String: "text",
    pl.Categorical: "text",
    pl.Enum: "text",
    pl.Null: "text",  # a column with no value yet: text is what a later load most likely brings
    pl.Boolean: "boolean",
    pl.Int8: "smallint",
    pl.Int16: "smallint",
    pl.UInt8: "smallint",
    pl.Int32: "integer",
    pl.UInt16: "integer",
    pl.Int64: "bigint",
    pl.UInt32: "bigint",
    pl.UInt64: "numeric",
    pl.Float32: "real",
    pl.Float64: "double precision",
    pl.Decimal: "numeric",
    pl.Date: "date",
    pl.Time: "time",
    pl.Duration: "interval",
    pl.Binary: "bytea",
}
_NESTED = (pl.List, pl.Array, pl.Struct)


def pg_type(dtype: pl.DataType) -> str:
    """The PostgreSQL column type of ``dtype``; a dtype with none (``Object``) is one line saying so."""
    if isinstance(dtype, _NESTED):
        return "jsonb"
    if isinstance(dtype, pl.Datetime):
        # An instant (a time zone) is timestamptz; a naive datetime stays naive, as polars wrote it.
        return "timestamp with time zone" if dtype.time_zone else "timestamp without time zone"
    for kind, name in _FLAT.items():
        if isinstance(dtype, kind):
            return name
    raise TypeError(f"a column of dtype {dtype} has no PostgreSQL type here: cast it (e.g. to String) first")


def is_nested(dtype: pl.DataType) -> bool:
    return isinstance(dtype, _NESTED)


def schema_bytes(schema: pl.Schema) -> bytes:
    """``schema`` as the bytes of an Arrow schema (what a load keeps to read its rows back with)."""
    return bytes(pl.DataFrame(schema=schema).to_arrow().schema.serialize().to_pybytes())


def schema_of(data: bytes) -> pl.Schema:
    """The polars schema :func:`schema_bytes` kept."""
    arrow = pa.ipc.read_schema(pa.py_buffer(data))
    frame = pl.from_arrow(arrow.empty_table())
    assert isinstance(frame, pl.DataFrame)
    return frame.schema


def _json_default(value: Any) -> Any:
    """JSON for what ``json`` cannot write, inside a nested value: instants and days as ISO-8601 text, bytes as
    hex, anything else as its text."""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def to_json(value: Any) -> str | None:
    """A nested cell as ``jsonb`` text (None stays NULL)."""
    return None if value is None else json.dumps(value, ensure_ascii=False, default=_json_default)
