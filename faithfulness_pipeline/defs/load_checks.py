"""The checks of ``raw_conversations`` evaluated while a day's landing files are loaded, when every file's own
schema is at hand: ``input_schema`` and ``unique_row_keys`` are *blocking* (a failure stops the LLM steps of
the run, so a bad delivery costs nothing); ``rows_before_partitions_start`` warns of rows no partition holds.
The checks of the stored tables are in ``defs.checks``."""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
from collections.abc import Callable, Sequence
from typing import Any

import dagster as dg
import polars as pl

from faithfulness_pipeline.core.combine import column_types
from faithfulness_pipeline.defs.metadata import EXAMPLES, md_list
from faithfulness_pipeline.sources.landing import LandingFile

INPUT_SCHEMA = "input_schema"
UNIQUE_KEYS = "unique_row_keys"
BEFORE_START = "rows_before_partitions_start"


def input_check_specs(asset: str) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            INPUT_SCHEMA,
            asset=asset,
            blocking=True,
            description="Landing files of this day agree on column types; required columns are there; the model "
            "column is text.",
        ),
        dg.AssetCheckSpec(
            UNIQUE_KEYS,
            asset=asset,
            blocking=True,
            description="Every judged answer has its own row key, across all landing files of this day.",
        ),
        dg.AssetCheckSpec(
            BEFORE_START,
            asset=asset,
            blocking=False,
            description="No landing row is dated before the first daily partition (FP_PARTITIONS_START): such rows "
            "belong to no partition and would never be scored. Warns with their count and files.",
        ),
    ]


def before_start_result(asset: str, first_day: str, counts: Sequence[tuple[LandingFile, int]]) -> dg.AssetCheckResult:
    """Rows of the landing location dated before ``first_day``, per file: they are in no partition."""
    found = [(f, n) for f, n in counts if n]
    total = sum(n for _, n in found)
    return dg.AssetCheckResult(
        asset_key=asset,
        check_name=BEFORE_START,
        passed=not found,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "rows_before_partitions_start": total,
            "first_partition": first_day,
            "files": md_list([f"`{f.path}`: {n} row(s)" for f, n in found[:EXAMPLES]]),
        },
        description=(
            f"{total} landing row(s) in {len(found)} file(s) are dated before the first partition {first_day} and "
            f"will never be scored: set FP_PARTITIONS_START to their first day (or earlier) to score them"
            if found else None
        ),
    )


def _is_text(dtype: pl.DataType) -> bool:
    return dtype in (pl.String, pl.Null) or isinstance(dtype, pl.Categorical | pl.Enum)


def input_schema_result(
    asset: str,
    files: Sequence[tuple[LandingFile, pl.Schema, int]],
    *,
    required: Sequence[str],
    model_column: str,
    timestamp_column: str,
) -> dg.AssetCheckResult:
    """``files`` = (file, its schema, its rows of this day); files without rows that day are ignored."""
    used = [(f, schema) for f, schema, rows in files if rows]
    problems: list[str] = []
    # The rule the CLI applies to its input files too (core.combine): one type per column across files.
    seen = column_types([(f.path, schema) for f, schema in used])
    for file, schema in used:
        missing = [c for c in required if c not in schema]
        if missing:
            problems.append(f"`{file.path}` lacks required column(s) {missing}; it has {list(schema.names())}")
        if model_column in schema and not _is_text(schema[model_column]):
            problems.append(
                f"`{file.path}`: model column `{model_column}` is {schema[model_column]}, expected text "
                f"(the BI aggregates group by it)"
            )
    for name, types in sorted(seen.items()):
        if len(types) > 1:
            detail = "; ".join(f"{t} in {', '.join(f'`{p}`' for p in paths)}" for t, paths in sorted(types.items()))
            problems.append(f"column `{name}` has different types across files: {detail}")
    undated = [f.path for f, schema in used if timestamp_column not in schema]
    metadata: dict[str, Any] = {
        "files": md_list([f"`{f.path}`: {rows} row(s)" for f, _, rows in files if rows]),
        "problems": md_list(problems),
        "files_without_timestamp_column": md_list(undated),
    }
    return dg.AssetCheckResult(
        asset_key=asset,
        check_name=INPUT_SCHEMA,
        passed=not problems,
        metadata=metadata,
        description=problems[0] if problems else None,
    )


def unique_keys_result(
    asset: str, hashed: Sequence[tuple[LandingFile, pl.Series]], named: Callable[[set[int]], dict[int, str]]
) -> dg.AssetCheckResult:
    """Keys are unique within one file already (normalisation refuses duplicates); this looks across files,
    by the keys' 64-bit hashes (8 bytes a row); ``named`` gives the keys of the hashes it reports."""
    frames = [
        pl.DataFrame({"hash": hashes, "file": pl.Series([f.path] * len(hashes), dtype=pl.String)})
        for f, hashes in hashed
    ]
    frame = pl.concat(frames) if frames else pl.DataFrame(schema={"hash": pl.UInt64, "file": pl.String})
    dupes = (
        frame.group_by("hash")
        .agg(pl.len().alias("rows"), pl.col("file").unique().sort().alias("files"))
        .filter(pl.col("rows") > 1)
    )
    names = named(set(dupes.get_column("hash").to_list())) if dupes.height else {}
    dupes = dupes.with_columns(
        pl.col("hash").replace_strict(names, default=None, return_dtype=pl.String).alias("row_key")
    ).sort("row_key")
    examples = [
        f"`{r['row_key']}` x{r['rows']} in {', '.join(f'`{p}`' for p in r['files'])}"
        for r in dupes.head(EXAMPLES).iter_rows(named=True)
    ]
    return dg.AssetCheckResult(
        asset_key=asset,
        check_name=UNIQUE_KEYS,
        passed=dupes.is_empty(),
        metadata={"duplicate_keys": dupes.height, "examples": md_list(examples)},
        description=(
            f"{dupes.height} row key(s) appear in more than one landing file (a file delivered twice?)"
            if examples
            else None
        ),
    )
