"""raw_conversations: the day's conversations from the landing location, validated and normalised, streamed.

Each landing file's rows of the day are read chunk by chunk (polars' streaming engine filters them by
day), prepared by the core (one row per judged answer, a row key) and appended to the day's file: no
process holds the day. The table keeps the input: every landing column and the row key, and the judged
answer, question and context only where they cannot be rebuilt from the input columns (chat messages):
for flat tables ``core.normalize.with_internals`` rebuilds them, so the passages are stored once.
"""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
from collections.abc import Iterator, Sequence
from datetime import date

import dagster as dg
import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.errors import ConfigError, InputError
from faithfulness_pipeline.core.keys import KeyRegistry, key_hashes
from faithfulness_pipeline.core.normalize import derives_flat, prepare, without_internals
from faithfulness_pipeline.defs import load_checks as checks
from faithfulness_pipeline.defs.metadata import table_metadata, version_metadata
from faithfulness_pipeline.defs.names import GROUP, RAW, RAW_REVISION
from faithfulness_pipeline.defs.resources import LandingResource, ScoringResource
from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.sources.landing import DayPart, LandingDay, LandingFile
from faithfulness_pipeline.sources.open import open_source
from faithfulness_pipeline.sources.table_landing import TablePart
from faithfulness_pipeline.traces.urls import scrubbed


def raw_asset(partitions: dg.PartitionsDefinition[str]) -> dg.AssetsDefinition:
    @dg.asset(
        name=RAW,
        group_name=GROUP,
        partitions_def=partitions,
        code_version=RAW_REVISION,
        kinds={"parquet", "polars"},
        check_specs=checks.input_check_specs(RAW),
        description="Conversations of the day from the landing location, validated and normalised: one row per "
        "judged answer (every landing column, row_key, and for chat rows the answer, question and context "
        "that will be judged).",
    )
    def raw_conversations(
        context: dg.AssetExecutionContext, landing: LandingResource, scoring: ScoringResource,
        warehouse: WarehouseResource,
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:  # type: ignore[type-arg]
        yield from load_raw(context, landing, scoring, warehouse, partitions.get_first_partition_key())

    return raw_conversations


def _prepared_schema(schema: pl.Schema, config: object, keep: bool) -> pl.Schema:
    frame = prepare(pl.DataFrame(schema=dict(schema)), config)  # type: ignore[arg-type]
    return frame.schema if keep else without_internals(frame).schema


def load_raw(
    context: dg.AssetExecutionContext, landing: LandingResource, scoring: ScoringResource,
    warehouse: WarehouseResource, first: str | None,
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:  # type: ignore[type-arg]
    """The day's rows of every landing file into raw_conversations, and the input checks; ``first`` is the
    first partition key."""
    day = date.fromisoformat(context.partition_key)
    config = scoring.config()
    # Not in a `with` block: a landing day stages span exports in the shared span cache, which outlives the run.
    try:
        source = open_source(LandingDay(landing.path, day, landing.timestamp_column, landing.undated(),
                                        landing.zone(), landing.query, landing.iceberg_catalog),
                             rows=config.chunk_rows)
    except (InputError, ConfigError) as exc:  # a refusal may quote the landing URL, with its password
        raise type(exc)(scrubbed(str(exc))) from None
    files = [part.file for part in source.parts]
    schemas = [(part, part.schema()) for part in source.parts]
    # The judged columns are kept only where the input cannot rebuild them (a chat file among the day's).
    keep = not all(derives_flat(schema, config) for _, schema in schemas)
    try:
        prepared = [(part.name, _prepared_schema(s, config, keep)) for part, s in schemas]
    except InputError as exc:
        raise _landing_error(files[0], exc) from None
    # Columns of different types across files are united to a common type here and reported by the blocking
    # input_schema check below (the raw table is kept for inspection); the CLI refuses them by the same rule.
    union = pl.concat([pl.DataFrame(schema=dict(s)) for _, s in prepared], how="diagonal_relaxed").schema
    counts: list[tuple[LandingFile, pl.Schema, int]] = []
    hashed: list[tuple[LandingFile, pl.Series]] = []
    with warehouse.writer(RAW, context.partition_key, empty=union) as out:
        for part, schema in schemas:
            # One registry per file: duplicates across files are reported by the unique-keys check, which can
            # name the files; duplicates inside one file are refused here with examples.
            registry = KeyRegistry()
            rows = 0
            keys = []
            for frame in part.chunks():
                try:
                    table = prepare(frame, config, registry)
                except InputError as exc:
                    raise _landing_error(part.file, exc) from None
                if not keep:
                    table = without_internals(table)
                out.write(_united(table, union))
                keys.append(key_hashes(table.get_column(S.ROW_KEY)))
                rows += table.height
            counts.append((part.file, schema, rows))
            hashed.append((part.file, pl.concat(keys) if keys else pl.Series(dtype=pl.UInt64)))
    early = _rows_before_start(context, source.parts, first)
    written = sum(n for _, _, n in counts)
    yield dg.MaterializeResult(metadata={
        **table_metadata(union, RAW, written),
        **version_metadata(warehouse.format_name(), out.committed),
        # the event log is shown to everyone who opens the UI: no password or api_key of the URL
        "landing": scrubbed(landing.path), "landing_files": len(files),
        "landing_kind": next((p.opened.kind for p in source.parts if isinstance(p, TablePart)), "files"),
        "files_with_rows": sum(1 for *_, n in counts if n),
        "rows_before_partitions_start": sum(n for _, n in early),
        "path": dg.MetadataValue.path(warehouse.location(RAW, context.partition_key)),
    })
    yield checks.input_schema_result(
        RAW, counts, required=landing.required_columns, model_column=scoring.model_column,
        timestamp_column=landing.timestamp_column,
    )
    yield checks.unique_keys_result(RAW, hashed, lambda wanted: _keys_named(warehouse, context.partition_key, wanted))
    yield checks.before_start_result(RAW, first or "", early)


def _rows_before_start(
    context: dg.AssetExecutionContext, parts: Sequence[DayPart | TablePart], first: str | None
) -> list[tuple[LandingFile, int]]:
    """How many rows of each landing file (or the landing table) are dated before the first partition (none
    are counted without one), logged as a warning when there are any: they are never scored."""
    early = [] if first is None else [(part.file, part.rows_before(date.fromisoformat(first))) for part in parts]
    if any(n for _, n in early):
        context.log.warning(
            f"{sum(n for _, n in early)} landing row(s) are dated before the first partition {first} and are "
            f"never scored (see the {checks.BEFORE_START} check)"
        )
    return early


def _united(table: pl.DataFrame, union: pl.Schema) -> pl.DataFrame:
    """``table`` with the day's columns, in the day's order, in the day's types."""
    return table.select(
        pl.col(name).cast(dtype) if name in table.columns else pl.lit(None, dtype=dtype).alias(name)
        for name, dtype in union.items()
    )


def _keys_named(warehouse: WarehouseResource, day: str, wanted: set[int]) -> dict[int, str]:
    """The row keys of the day whose hashes are ``wanted`` (the duplicates the check names)."""
    found: dict[int, str] = {}
    for batch in warehouse.batches(RAW, day, 100_000, columns=[S.ROW_KEY]):
        keys = batch.get_column(S.ROW_KEY)
        hashes = key_hashes(keys)
        for h, k in zip(hashes.filter(hashes.is_in(list(wanted))), keys.filter(hashes.is_in(list(wanted))),
                        strict=True):
            found.setdefault(int(h), k)
    return found


def _landing_error(file: LandingFile, exc: InputError) -> InputError:
    return InputError(
        f"landing file {scrubbed(file.path)!r} cannot be scored: {scrubbed(str(exc))} In Dagster, the column "
        "names are the scoring resource's *_column settings."
    )
