"""Several input files scored as one table: each file is normalised on its own (flat and chat files may sit
side by side, and their passthrough columns may differ), then their columns are united by name.

One rule for the CLI and the Dagster landing: a column has one type in every file that has it. The CLI
refuses a disagreement before any call (:func:`union_schema`); the Dagster load reports it in its blocking
``input_schema`` check (:func:`column_types`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from faithfulness_pipeline.core.errors import InputError


def column_types(schemas: Sequence[tuple[str, Mapping[str, pl.DataType]]]) -> dict[str, dict[str, list[str]]]:
    """Per column name, the files holding each of its types (an all-null column fits any type and is left
    out). A column with more than one type disagrees across the files."""
    seen: dict[str, dict[str, list[str]]] = {}
    for path, schema in schemas:
        for name, dtype in schema.items():
            if dtype != pl.Null:
                seen.setdefault(name, {}).setdefault(str(dtype), []).append(path)
    return seen


def union_schema(
    schemas: Sequence[tuple[str, Mapping[str, pl.DataType]]], trailing: Sequence[str] = ()
) -> pl.Schema:
    """The columns of all ``(file, schema)`` pairs by name, in first-seen order (the ``trailing`` names
    last, in their order). A column must have one type in every file that has it (or be all null there);
    otherwise an error names the column, both types and both files."""
    for name, types in column_types(schemas).items():
        if len(types) > 1:
            (a, a_paths), (b, b_paths) = list(types.items())[:2]
            raise InputError(
                f"input files disagree on column {name!r}: {a} in {a_paths[0]!r}, {b} in {b_paths[0]!r}. Rewrite "
                f"one of them to the other's type, or score them separately."
            )
    columns: dict[str, pl.DataType] = {}
    for _, schema in schemas:
        for name, dtype in schema.items():
            if name not in columns or columns[name] == pl.Null:
                columns[name] = dtype
    last = [n for n in trailing if n in columns]
    trailing_set = set(last)
    order = [n for n in columns if n not in trailing_set] + last
    return pl.Schema({n: columns[n] for n in order})


def conform(frame: pl.DataFrame, schema: pl.Schema) -> pl.DataFrame:
    """``frame`` with exactly the columns of ``schema``, in its order: missing ones null, others cast."""
    present = set(frame.columns)  # once: ``frame.columns`` builds a new list at each call (10,000 columns)
    try:
        return frame.select(
            pl.col(name).cast(dtype) if name in present else pl.lit(None, dtype=dtype).alias(name)
            for name, dtype in schema.items()
        )
    except pl.exceptions.PolarsError as exc:
        raise InputError(
            f"the input files' columns cannot be united ({' '.join(str(exc).split())[:200]}). Rewrite the files to "
            f"one type per column, or score them separately."
        ) from None
