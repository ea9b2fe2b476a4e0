"""raw_conversations: the day's conversations from the landing location, validated and normalised."""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
from collections.abc import Iterator
from datetime import date

import dagster as dg
import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.core.io import file_schema
from faithfulness_pipeline.core.normalize import KeyRegistry, prepare
from faithfulness_pipeline.defs import checks
from faithfulness_pipeline.defs.landing import list_landing, load_day, rows_before
from faithfulness_pipeline.defs.names import GROUP, RAW, RAW_REVISION
from faithfulness_pipeline.defs.resources import LandingResource, ScoringResource


def raw_asset(partitions: dg.PartitionsDefinition[str]) -> dg.AssetsDefinition:
    @dg.asset(
        name=RAW,
        group_name=GROUP,
        partitions_def=partitions,
        code_version=RAW_REVISION,
        kinds={"parquet", "polars"},
        check_specs=checks.input_check_specs(RAW),
        description="Conversations of the day from the landing location, validated and normalised: one row per "
        "judged answer (passthrough columns + row_key + the answer, question and context that will be judged).",
    )
    def raw_conversations(
        context: dg.AssetExecutionContext, landing: LandingResource, scoring: ScoringResource
    ) -> Iterator[dg.Output[pl.DataFrame] | dg.AssetCheckResult]:
        yield from load_raw(context, landing, scoring, partitions.get_first_partition_key())

    return raw_conversations


def load_raw(
    context: dg.AssetExecutionContext, landing: LandingResource, scoring: ScoringResource, first: str | None
) -> Iterator[dg.Output[pl.DataFrame] | dg.AssetCheckResult]:
    """The day's rows of every landing file, and the input checks; ``first`` is the first partition key."""
    day = date.fromisoformat(context.partition_key)
    config = scoring.config()
    files = list_landing(landing.path)
    if not files:
        raise InputError(f"the landing location {landing.path!r} holds no Parquet, JSON Lines or CSV files yet")
    prepared: list[pl.DataFrame] = []
    schemas = []
    keyed = []
    for file, frame in load_day(files, day, landing.timestamp_column, landing.undated(), landing.zone()):
        # One registry per file: duplicates across files are reported by the unique-keys check, which can
        # name the files; duplicates inside one file are refused here with examples.
        try:
            table = prepare(frame, config, KeyRegistry())
        except InputError as exc:
            raise InputError(
                f"landing file {file.path!r} cannot be scored: {exc} In Dagster, the column names are the "
                f"scoring resource's *_column settings."
            ) from None
        prepared.append(table)
        schemas.append((file, file_schema(file.path), frame.height))
        keyed.append((file, table.get_column(S.ROW_KEY)))
    # Columns of different types across files are united here and reported by the blocking input_schema
    # check below (the raw table is kept for inspection); the CLI refuses them by the same rule.
    raw = pl.concat(prepared, how="diagonal_relaxed")
    contributing = sum(1 for _, _, rows in schemas if rows)
    early = [] if first is None else [
        (file, rows_before(file, date.fromisoformat(first), landing.timestamp_column, landing.undated(),
                           landing.timezone))
        for file in files
    ]
    if any(n for _, n in early):
        context.log.warning(
            f"{sum(n for _, n in early)} landing row(s) are dated before the first partition {first} and are "
            f"never scored (see the {checks.BEFORE_START} check)"
        )
    yield dg.Output(
        raw,
        metadata={"landing": landing.path, "landing_files": len(files), "files_with_rows": contributing,
                  "rows_before_partitions_start": sum(n for _, n in early)},
    )
    yield checks.input_schema_result(
        RAW, schemas, required=landing.required_columns, model_column=scoring.model_column,
        timestamp_column=landing.timestamp_column,
    )
    yield checks.unique_keys_result(RAW, keyed)
    yield checks.before_start_result(RAW, first or "", early)
