"""Where the answer-quality report reads its rows: a warehouse or a scored table, in chunks (``report.summary``
folds them into what the page shows).

The report reads either a warehouse (``<root>/scored_conversations/ds=*/data.parquet``; the day is the
partition; local or in an object store, ``tables.storage``; or a warehouse in any table format, read through
the table-format port: :class:`WarehouseTables`, the command line's) or a scored table written by
``faithfulness-pipeline score`` (a file, folder or glob, local or a URI; the day is the date of
``timestamp_column`` in ``timezone``, else of ``scored_at``). Everything else — the per day × model table,
the distributions, the verdict mix, the worst answers — is derived from the scored rows themselves, so a
warehouse and a CLI output give the same report for the same rows. Every row is read once, a chunk at a time,
with its light columns only; the texts and full verdicts are read for the worst answers alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from faithfulness_pipeline.core.claimless import answer_words
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.tables.delta_tables import live_files
from faithfulness_pipeline.tables.inputs import PARQUET, input_format, resolve_inputs
from faithfulness_pipeline.tables.read import READ_ERRORS, parquet_batches, parquet_schema, read_error
from faithfulness_pipeline.tables.storage import Place
from faithfulness_pipeline.tables.table_format import OneFilePerPartition, TableFormat

#: Folder names a calibration table may have in a warehouse (issue 16 builds it; the report only shows it).
CALIBRATION_TABLES = ("judge_calibration", "calibration")
#: The day column of the report's frames.
DAY = "day"
#: How a claim is marked in the report: the first mark that applies, worst first.
MARKS = ("contradicted", "unsupported", "speculative", "supported")


#: A warehouse's data files by table, where its table format lists them (``defs.warehouse.listed_files``: an
#: ``iceberg`` table's current snapshot, ``<...>/data/ds=YYYY-MM-DD/<file>.parquet``) rather than the Parquet layout.
Listed = Mapping[str, Sequence[Place]]


def _warehouse_files(root: Place, table: str, listed: Listed | None = None) -> list[Place]:
    """``<root>/<table>/ds=*/*.parquet``: the table's daily partitions (``listed``: the listed files); a Delta
    table's files of its latest version (the folder holds those of replaced versions too)."""
    if listed is not None:
        return list(listed.get(table, ()))
    folder = root.child(table)
    live = live_files(folder)
    if live is not None:
        return live
    return [f for f in folder.files(".parquet")
            if f.parent().name.startswith("ds=") and f.parent().parent().path == folder.path]


#: The warehouse's table of scored rows.
SCORED_TABLE = "scored_conversations"


@dataclass(frozen=True)
class WarehouseTables:
    """A warehouse read through its table format (``tables.table_format``), whatever the format: every day of its
    scored table that the format lists, now or as of ``as_of`` (a ``table_version`` of the scored table). As of a
    version, the tables of other versions (the corrected figures, the calibration) are left out: their versions
    are not the scored table's."""

    tables: TableFormat
    as_of: str | None = None

    def describe(self) -> str:
        when = f" as of version {self.as_of}" if self.as_of is not None else ""
        return f"in the {self.tables.name} table format{when}"

    def days(self, where: str) -> list[str | None]:
        """The scored table's days; a warehouse without them is one line saying what to do."""
        days = self.tables.partitions(SCORED_TABLE, self.as_of)
        if not days:
            raise InputError(f"warehouse {where!r} has no {SCORED_TABLE} table {self.describe()}: materialise it "
                             f"first, or name the format it was written in (--table-format, FP_TABLE_FORMAT)")
        return days

    def schema(self, table: str, day: str | None) -> pl.Schema:
        if self.as_of is None:
            return self.tables.schema(table, day)
        return self.tables.scan(table, [day], self.as_of).collect_schema()

    def batches(self, table: str, day: str | None, rows: int, columns: Sequence[str]) -> Iterator[pl.DataFrame]:
        """A day's ``columns`` in chunks of at most ``rows`` rows: the format's own bounded reader now; a past
        version through its scan (``as_of``)."""
        if self.as_of is None:
            yield from self.tables.batches(table, day, rows, columns)
            return
        scan = self.tables.scan(table, [day], self.as_of).select(columns)
        for batch in scan.collect_batches(chunk_size=rows, lazy=True):
            yield from batch.iter_slices(rows)

    def parquet_files(self) -> list[str] | None:
        """The scored table's files where the format keeps a partition in one file (the Parquet layout), now: read
        as a scored table's files are, only the columns and row groups wanted; None in another format."""
        if not isinstance(self.tables, OneFilePerPartition) or self.as_of is not None:
            return None
        return [self.tables.file(SCORED_TABLE, day).uri for day in self.tables.partitions(SCORED_TABLE)]

    def whole(self, table: str) -> pl.DataFrame | None:
        """A small table (the corrected figures, a calibration) read whole, every day; None where it has none, and
        as of a version of the scored table."""
        if self.as_of is not None:
            return None
        days = self.tables.partitions(table)
        return self.tables.scan(table, days).collect() if days else None


def is_warehouse(spec: str | os.PathLike[str] | Place) -> bool:
    """Whether ``spec`` is a warehouse folder (it has a ``scored_conversations`` table); a glob is none."""
    text = spec.uri if isinstance(spec, Place) else os.fspath(spec)
    if any(c in text for c in "*?["):
        return False
    root = Place.of(spec)
    return root.is_dir() and root.child("scored_conversations").is_dir()


#: The scored table's columns the report reads (besides the model, language, answer, question and time columns).
SCORED_NEEDS = (
    "row_key", "status", "verdicts", "n_claims", "n_supported", "n_contradicted", "n_unsupported", "n_speculative",
    "hallucination_score", "faithfulness_score", "judge_model", "prompt_version", "scored_at", "llm_calls",
    "prompt_tokens", "completion_tokens", "cost_usd", "result_source", "billed_llm_calls", "billed_prompt_tokens",
    "billed_completion_tokens", "billed_cost_usd",
)


#: What the report keeps of every row's claims: how many it shows under each mark (for the verdict mix), as
#: counted from the verdicts while the file is read. The claims, reasons and evidence passages are read only
#: for the worst answers it shows (:func:`rows_of`): a day of a million answers holds gigabytes of them.
MARK_COUNTS = {mark: f"__fp_marked_{mark}" for mark in ("contradicted", "unsupported", "speculative", "supported")}


def _marked(mark: str) -> pl.Expr:
    """Claims of each row under ``mark`` (the first of :data:`MARKS` that applies to the claim)."""
    verdict = pl.element().struct.field("verdict")
    hedged = pl.element().struct.field("speculative").fill_null(False)
    which = {
        "contradicted": verdict == "contradicted",
        "speculative": (verdict != "contradicted") & hedged,
        "unsupported": (verdict == "unsupported") & ~hedged,
        "supported": ~verdict.is_in(["contradicted", "unsupported"]) & ~hedged,
    }[mark]
    return pl.col("verdicts").list.eval(which).list.sum().fill_null(0).cast(pl.Int64).alias(MARK_COUNTS[mark])


def _scored_file(file: str) -> pl.Schema:
    """The columns of a scored table's file, refusing (one line naming the file) what is no scored table's:
    another format, a file that is not Parquet, two columns of one name, the score columns mistyped."""
    fmt = input_format(file)
    if fmt != PARQUET:
        raise InputError(
            f"{file!r} is {fmt}, not a scored table: the report reads the Parquet table `faithfulness-pipeline score "
            f"-o` writes (or a warehouse folder). Score the file first, then report on its output."
        )
    return _checked_kinds(pl.Schema(parquet_schema(file)), file)


def _checked_kinds(schema: pl.Schema, where: str) -> pl.Schema:
    for name, kind in _SCORED_KINDS.items():
        if name in schema and not kind(schema[name]):
            raise InputError(
                f"column {name!r} of {where!r} has type {schema[name]}, not the type of a scored table's "
                f"{name!r}: give the output of `faithfulness-pipeline score` (or a warehouse folder)."
            )
    return schema


def _verdict_list(dtype: pl.DataType) -> bool:
    if not (isinstance(dtype, pl.List) and isinstance(dtype.inner, pl.Struct)):
        return False
    return {"verdict", "speculative"} <= {f.name for f in dtype.inner.fields}


#: What the report computes on, by column: a table whose column is of another kind is no scored table.
_SCORED_KINDS: dict[str, Callable[[pl.DataType], bool]] = {
    "row_key": lambda d: d == pl.String, "status": lambda d: d == pl.String, "verdicts": _verdict_list,
    **{n: (lambda d: d.is_numeric()) for n in ("n_claims", "n_supported", "n_contradicted", "n_unsupported",
                                                "n_speculative", "hallucination_score", "faithfulness_score")},
}


#: What the report keeps of every answer (the text itself is read for the worst answers alone).
ANSWER_SCRIPT = "__fp_answer_script"
ANSWER_WORDS = "__fp_answer_words"


def script(answer: pl.Expr) -> pl.Expr:
    """The answer's script: Hangul ko, Han zh, else other."""
    text = answer.cast(pl.String).fill_null("")
    return (
        pl.when(text.str.contains(r"\p{Hangul}")).then(pl.lit("ko"))
        .when(text.str.contains(r"\p{Han}")).then(pl.lit("zh"))
        .otherwise(pl.lit("other"))
    )


#: The verdicts' fields the report reads of every row (to count its claims under each mark); the claims,
#: reasons and evidence passages are read for the worst answers alone (:func:`rows_of`).
VERDICT_FIELDS = ("verdicts.list.element.verdict", "verdicts.list.element.speculative")
#: Rows read at a time: a chunk (its answers' texts while their script and words are counted) is all the
#: report holds of the rows; what it keeps of them is merged tallies and counts.
CHUNK_ROWS = 50_000
#: A chunk read through a table format is this share of :data:`CHUNK_ROWS` (its verdicts come whole).
TABLE_CHUNK_SHARE = 5


def light(frame: pl.DataFrame, answer_column: str | None) -> pl.DataFrame:
    """A chunk with its verdicts as mark counts and its answers as their script and word count."""
    derived = []
    if "verdicts" in frame.columns:
        derived += [_marked(m) for m in MARK_COUNTS]
    if answer_column is not None and answer_column in frame.columns:
        derived += [script(pl.col(answer_column)).alias(ANSWER_SCRIPT),
                    answer_words(pl.col(answer_column)).alias(ANSWER_WORDS)]
    return frame.with_columns(derived).drop("verdicts", *([answer_column] if answer_column else []), strict=False)


def _file_chunks(file: str, wanted: set[str], answer_column: str | None, rows: int) -> Iterator[pl.DataFrame]:
    """One scored file's ``wanted`` columns (the verdicts' light fields, the answers' text) in chunks of at
    most ``rows`` rows, read a row group at a time; a file without rows gives one empty chunk."""
    schema = _scored_file(file)
    names = schema.names()
    columns = [c for c in names if c in wanted and c not in ("verdicts", answer_column)]
    columns += list(VERDICT_FIELDS) if "verdicts" in names else []
    columns += [answer_column] if answer_column is not None and answer_column in names else []
    try:
        empty = True
        for batch in parquet_batches(pq.ParquetFile(Place.of(file).open_input()), rows, columns):
            frame = pl.from_arrow(batch)
            assert isinstance(frame, pl.DataFrame)
            empty = False
            yield light(frame, answer_column)
        if empty:
            yield light(pl.DataFrame(schema={c: schema[c] for c in names if c in wanted or c == answer_column}),
                         answer_column)
    except READ_ERRORS as exc:
        raise read_error(file, exc) from exc


def _table_chunks(spec: str, warehouse: WarehouseTables, wanted: set[str], answer_column: str | None,
                  rows: int) -> Iterator[pl.DataFrame]:
    """The scored rows of every day of a warehouse read through its table format, as :func:`scored_chunks`
    gives them: the day is the partition."""
    for day in warehouse.days(spec):
        date = (pl.lit(day).str.to_date("%Y-%m-%d", strict=False) if day else pl.lit(None, pl.Date)).alias(DAY)
        if isinstance(warehouse.tables, OneFilePerPartition) and warehouse.as_of is None:
            # The layout's files, read as a scored table's: the verdicts' two light fields, not every claim's text.
            for chunk in _file_chunks(warehouse.tables.file(SCORED_TABLE, day).uri, wanted, answer_column, rows):
                yield chunk.with_columns(date)
            continue
        where = f"{spec} ({SCORED_TABLE} {day or ''})"
        schema = _checked_kinds(warehouse.schema(SCORED_TABLE, day), where)
        _check_scored(spec, where, schema.names())
        columns = [c for c in schema.names() if c in wanted or c in ("verdicts", answer_column)]
        empty = True
        # A format reads whole columns: every claim's text, reason and passage of the verdicts comes with the
        # chunk (the Parquet files give the verdicts' two light fields alone), so its chunks are smaller.
        for frame in warehouse.batches(SCORED_TABLE, day, max(1, rows // TABLE_CHUNK_SHARE), columns):
            empty = False
            yield light(frame, answer_column).with_columns(date)
        if empty:
            yield light(pl.DataFrame(schema={c: schema[c] for c in columns}), answer_column).with_columns(date)


def _check_scored(spec: str, file: str, names: Sequence[str]) -> None:
    missing = [c for c in ("row_key", "status", "hallucination_score", "faithfulness_score") if c not in names]
    if "verdicts" not in names:
        missing.append("verdicts")
    if missing:
        raise InputError(
            f"{spec!r} is not a scored table ({file!r} has no column {', '.join(missing)}): give a warehouse folder "
            f"or the output of `faithfulness-pipeline score`"
        )


def scored_chunks(spec: str, *, timestamp_column: str = "created_at", timestamp_required: bool = False,
                  timezone: str = "UTC", columns: tuple[str, ...] = (), answer_column: str | None = None,
                  rows: int = CHUNK_ROWS, listed: Listed | None = None,
                  warehouse: WarehouseTables | None = None) -> Iterator[pl.DataFrame]:
    """The scored rows of a warehouse or a scored table in chunks of at most ``rows`` rows, each with a
    ``day`` (Date) column: the report's own columns, ``columns``, and the ``answer_column`` as its script and
    word count (the texts of a month are gigabytes; the page shows a few). A table without
    ``timestamp_column`` is dated by ``scored_at``, unless the column was named on purpose
    (``timestamp_required``): then it is refused, as a model column named on purpose is. ``warehouse``: ``spec``
    is a warehouse read through its table format."""
    wanted = {*SCORED_NEEDS, *columns, timestamp_column}
    if warehouse is not None:
        yield from _table_chunks(spec, warehouse, wanted, answer_column, rows)
        return
    if listed is not None or is_warehouse(spec):
        files = _warehouse_files(Place.of(spec), "scored_conversations", listed)
        if not files:
            raise InputError(f"warehouse {spec!r} has no scored_conversations partitions yet: materialise them first")
        for place in files:
            day = pl.lit(place.parent().name.removeprefix("ds=")).str.to_date("%Y-%m-%d", strict=False)
            for chunk in _file_chunks(place.uri, wanted, answer_column, rows):
                yield chunk.with_columns(day.alias(DAY))
        return
    for file in resolve_inputs(spec):
        names = _scored_file(file).names()
        _check_scored(spec, file, names)
        if timestamp_required and timestamp_column not in names:
            raise InputError(f"{file!r} has no column {timestamp_column!r} (--timestamp-col): name one of its "
                             "columns, or leave --timestamp-col out to date rows by created_at (else scored_at)")
        for chunk in _file_chunks(file, wanted, answer_column, rows):
            source = timestamp_column if timestamp_column in chunk.columns else "scored_at"
            yield chunk.with_columns(day_of(chunk, source, timezone).alias(DAY))


def _read_table(file: str) -> pl.DataFrame:
    """A whole Parquet table (a calibration table), a file that is no Parquet one line naming it."""
    if input_format(file) != PARQUET:
        raise InputError(f"{file!r} is {input_format(file)}: a calibration table is the Parquet file "
                         f"`faithfulness-pipeline calibrate -o` writes")
    parquet_schema(file)
    try:
        return pl.read_parquet(file)
    except READ_ERRORS as exc:
        raise read_error(file, exc) from exc


def _table_rows(warehouse: WarehouseTables, row_keys: list[str], columns: Sequence[str]) -> dict[str, dict[str, Any]]:
    """:func:`rows_of` of a warehouse read through its table format: each day's rows of these keys (the format
    reads the keys and, where its scan pushes the filter down, the heavy columns of those rows only)."""
    found: dict[str, dict[str, Any]] = {}
    for day in warehouse.tables.partitions(SCORED_TABLE, warehouse.as_of):
        missing = [k for k in row_keys if k not in found]
        if not missing:
            break
        scan = warehouse.tables.scan(SCORED_TABLE, [day], warehouse.as_of)
        names = scan.collect_schema().names()
        wanted = ["row_key", *dict.fromkeys(c for c in columns if c in names and c != "row_key")]
        for row in scan.filter(pl.col("row_key").is_in(missing)).select(wanted).collect().iter_rows(named=True):
            found.setdefault(row.pop("row_key"), row)
    return found


def rows_of(spec: str, row_keys: list[str], columns: Sequence[str] = ("verdicts",),
            listed: Listed | None = None, warehouse: WarehouseTables | None = None) -> dict[str, dict[str, Any]]:
    """These rows of a warehouse or scored table by row key, with the ``columns`` they have (the full
    verdicts: claim, reason, evidence; the answer and question texts). Each file's row keys are read first,
    a row group at a time; the heavy columns only of the row groups that hold a wanted key, a chunk at a
    time (a row group's claims and texts decoded at once are hundreds of megabytes)."""
    if not row_keys:
        return {}
    layout = warehouse.parquet_files() if warehouse is not None else None
    if warehouse is not None and layout is None:
        return _table_rows(warehouse, row_keys, columns)
    files = (layout if layout is not None else
             [f.uri for f in _warehouse_files(Place.of(spec), "scored_conversations", listed)]
             if listed is not None or is_warehouse(spec) else resolve_inputs(spec))
    found: dict[str, dict[str, Any]] = {}
    for file in files:
        names = _scored_file(file).names()
        wanted = ["row_key", *dict.fromkeys(c for c in columns if c in names and c != "row_key")]
        try:
            parquet = pq.ParquetFile(Place.of(file).open_input())
            for group in range(parquet.metadata.num_row_groups):
                missing = [k for k in row_keys if k not in found]
                if not missing:
                    return found
                keys = pl.from_arrow(parquet.read_row_group(group, columns=["row_key"]).column(0))
                assert isinstance(keys, pl.Series)
                if not keys.is_in(missing).any():
                    continue
                for batch in parquet_batches(parquet, CHUNK_ROWS // 10, wanted, row_groups=[group]):
                    rows = pl.from_arrow(batch)
                    assert isinstance(rows, pl.DataFrame)
                    for row in rows.filter(pl.col("row_key").is_in(missing)).iter_rows(named=True):
                        found.setdefault(row.pop("row_key"), row)
        except READ_ERRORS as exc:
            raise read_error(file, exc) from exc
    return found


def load_scored(spec: str, *, timestamp_column: str = "created_at", timezone: str = "UTC",
                columns: tuple[str, ...] = (), answer_column: str | None = None) -> pl.DataFrame:
    """Every chunk of :func:`scored_chunks` in one frame: for small tables (the report itself never holds
    them, it folds the chunks)."""
    return pl.concat(list(scored_chunks(spec, timestamp_column=timestamp_column, timezone=timezone,
                                        columns=columns, answer_column=answer_column)), how="diagonal_relaxed")


def day_of(frame: pl.DataFrame, column: str, timezone: str,
           fix: str = "name another with --timestamp-col") -> pl.Expr:
    """The local date in ``timezone`` of a datetime (naive = UTC), date or ISO-8601 text column; ``fix`` says
    how to name another column when it holds none of those."""
    dtype = frame.schema[column]
    value = pl.col(column)
    if dtype == pl.String:
        value = value.str.to_datetime(strict=False, time_zone="UTC")
        dtype = pl.Datetime("us", "UTC")
    if isinstance(dtype, pl.Datetime):
        if dtype.time_zone is None:
            value = value.dt.replace_time_zone("UTC")
        return value.dt.convert_time_zone(timezone).dt.date()
    if dtype == pl.Date:
        return value
    raise InputError(f"column {column!r} holds {dtype}, not a timestamp: {fix}")


def load_calibration(spec: str | None, warehouse: Place | None, listed: Listed | None = None,
                     tables: WarehouseTables | None = None) -> pl.DataFrame | None:
    """The judge's calibration table when one is given or the warehouse has one; None otherwise (``tables``: the
    warehouse read through its table format)."""
    if spec:
        return pl.concat([_read_table(f) for f in resolve_inputs(spec)], how="diagonal_relaxed")
    if tables is not None:
        return next((t for t in map(tables.whole, CALIBRATION_TABLES) if t is not None), None)
    if warehouse is None:
        return None
    for table in CALIBRATION_TABLES:
        folder = warehouse.child(table)
        files = _warehouse_files(warehouse, table, listed) or ([] if listed is not None else [
            f for f in folder.files(".parquet") if f.parent().path == folder.path
        ])
        if files:
            return pl.concat([_read_table(f.uri) for f in files], how="diagonal_relaxed")
    return None


#: The warehouse's table of the figures corrected by people's labels (``outputs.corrected``).
CORRECTED_TABLE = "daily_corrected_quality"


def load_corrected(warehouse: Place | None, listed: Listed | None = None,
                   tables: WarehouseTables | None = None) -> pl.DataFrame | None:
    """The warehouse's corrected figures of the groups that have them (a few rows a day), day by day; None
    where there are none (``tables``: the warehouse read through its table format)."""
    if tables is not None:
        found = tables.whole(CORRECTED_TABLE)
        if found is None:
            return None
        table = found
    else:
        if warehouse is None:
            return None
        files = _warehouse_files(warehouse, CORRECTED_TABLE, listed)
        if not files:
            return None
        table = pl.concat([_read_table(f.uri) for f in files], how="diagonal_relaxed")
    if "over_threshold_share_corrected" not in table.columns:
        return None
    kept = table.filter(pl.col("over_threshold_share_corrected").is_not_null())
    return kept.sort("day", "model", "language", nulls_last=True) if kept.height else None
