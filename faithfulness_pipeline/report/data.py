"""What the answer-quality report shows, computed from a scored table (pure polars, no I/O but reading).

The report reads either a warehouse (``<root>/scored_conversations/ds=*/data.parquet``; the day is the
partition; local or in an object store, ``tables.storage``) or a scored table written by
``faithfulness-pipeline score`` (a file, folder or glob, local or a URI; the day is the date of
``timestamp_column`` in ``timezone``, else of ``scored_at``). Everything else — the per day × model table,
the distributions, the verdict mix, the worst answers — is derived from the scored rows themselves, so a
warehouse and a CLI output give the same report for the same rows.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from faithfulness_pipeline.core.aggregates import daily_aggregates
from faithfulness_pipeline.core.claimless import Claimless, answer_words, count_claimless
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.report.comparisons import model_differences
from faithfulness_pipeline.settings.scoring import ScoringSettings
from faithfulness_pipeline.tables.inputs import PARQUET, input_format, resolve_inputs
from faithfulness_pipeline.tables.read import READ_ERRORS, parquet_schema, read_error
from faithfulness_pipeline.tables.storage import Place

#: Folder names a calibration table may have in a warehouse (issue 16 builds it; the report only shows it).
CALIBRATION_TABLES = ("judge_calibration", "calibration")
#: The day column of the report's frames.
DAY = "day"
#: How a claim is marked in the report: the first mark that applies, worst first.
MARKS = ("contradicted", "unsupported", "speculative", "supported")


@dataclass(frozen=True)
class ReportData:
    """Everything the page shows, already reduced (its size does not grow with the rows beyond ``worst``)."""

    source: str
    scored_rows: int
    daily: pl.DataFrame  # core.aggregates schema: one row per day x model
    hallucination: list[float]  # every score, for the distributions
    faithfulness: list[float]
    verdict_mix: pl.DataFrame  # language, mark, claims
    claims_per_answer: pl.DataFrame  # n_claims, answers (ok rows)
    worst: list[dict[str, Any]]  # the worst answers with their claims
    judges: list[tuple[str, str, int]]  # judge model, prompt version, rows
    threshold: float
    scale: float
    calibration: pl.DataFrame | None = None
    warnings: list[str] = field(default_factory=list)  # one line each, shown above the numbers
    comparisons: list[str] = field(default_factory=list)  # the models against each other, in words


def _warehouse_files(root: Place, table: str) -> list[Place]:
    """``<root>/<table>/ds=*/*.parquet``: the table's daily partitions."""
    folder = root.child(table)
    return [f for f in folder.files(".parquet")
            if f.parent().name.startswith("ds=") and f.parent().parent().path == folder.path]


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
    schema = pl.Schema(parquet_schema(file))
    for name, kind in _SCORED_KINDS.items():
        if name in schema and not kind(schema[name]):
            raise InputError(
                f"column {name!r} of {file!r} has type {schema[name]}, not the type of a scored table's "
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


def _script(answer: pl.Expr) -> pl.Expr:
    """The answer's script: Hangul ko, Han zh, else other."""
    text = answer.cast(pl.String).fill_null("")
    return (
        pl.when(text.str.contains(r"\p{Hangul}")).then(pl.lit("ko"))
        .when(text.str.contains(r"\p{Han}")).then(pl.lit("zh"))
        .otherwise(pl.lit("other"))
    )


def _read(file: str, wanted: set[str] | None, answer_column: str | None = None) -> pl.DataFrame:
    """One Parquet file (a path or a URI: polars reads both), only the ``wanted`` columns it has (contexts
    and other passthrough stay unread), with the light verdicts when ``wanted`` names the columns. The
    ``answer_column`` is read as its script and its word count: the texts of a warehouse's answers are
    gigabytes, and the page shows a few."""
    schema = _scored_file(file)
    try:
        if wanted is None:
            return pl.read_parquet(file)
        present = [c for c in schema.names() if c in wanted and c != answer_column]
        lazy = pl.scan_parquet(file)
        derived = [] if answer_column is None or answer_column not in schema.names() else [
            _script(pl.col(answer_column)).alias(ANSWER_SCRIPT),
            answer_words(pl.col(answer_column)).alias(ANSWER_WORDS),
        ]
        marks = [_marked(m) for m in MARK_COUNTS] if "verdicts" in present else []
        return lazy.select(
            *(pl.col(c) for c in present if c != "verdicts"), *marks, *derived
        ).collect(engine="streaming")
    except READ_ERRORS as exc:
        raise read_error(file, exc) from exc


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


def rows_of(spec: str, row_keys: list[str], columns: Sequence[str] = ("verdicts",)) -> dict[str, dict[str, Any]]:
    """These rows of a warehouse or scored table by row key, with the ``columns`` they have (the full
    verdicts: claim, reason, evidence; the answer and question texts)."""
    if not row_keys:
        return {}
    files = ([f.uri for f in _warehouse_files(Place.of(spec), "scored_conversations")] if is_warehouse(spec)
             else resolve_inputs(spec))
    found: dict[str, dict[str, Any]] = {}
    for file in files:
        names = _scored_file(file).names()
        try:
            rows = (pl.scan_parquet(file).filter(pl.col("row_key").is_in(row_keys))
                    .select("row_key", *dict.fromkeys(c for c in columns if c in names and c != "row_key"))
                    .collect(engine="streaming"))
        except READ_ERRORS as exc:
            raise read_error(file, exc) from exc
        for row in rows.iter_rows(named=True):
            found.setdefault(row.pop("row_key"), row)
    return found


def load_scored(spec: str, *, timestamp_column: str = "created_at", timezone: str = "UTC",
                columns: tuple[str, ...] | None = None, answer_column: str | None = None) -> pl.DataFrame:
    """The scored rows of a warehouse or a scored table, with a ``day`` (Date) column; with ``columns``,
    only those (and the report's own) are read, and the ``answer_column`` as its script and word count."""
    wanted = None if columns is None else {*SCORED_NEEDS, *columns, timestamp_column}
    if is_warehouse(spec):
        files = _warehouse_files(Place.of(spec), "scored_conversations")
        if not files:
            raise InputError(f"warehouse {spec!r} has no scored_conversations partitions yet: materialise them first")
        frames = [
            _read(f.uri, wanted, answer_column).with_columns(
                pl.lit(f.parent().name.removeprefix("ds=")).alias("__ds"))
            for f in files
        ]
        frame = pl.concat(frames, how="diagonal_relaxed")
        day = pl.col("__ds").str.to_date("%Y-%m-%d", strict=False)
        return frame.with_columns(day.alias(DAY)).drop("__ds")
    tables = resolve_inputs(spec)
    frame = pl.concat([_read(f, wanted, answer_column) for f in tables], how="diagonal_relaxed")
    missing = [c for c in ("row_key", "status", "hallucination_score", "faithfulness_score")
               if c not in frame.columns]
    if "verdicts" not in frame.columns and MARK_COUNTS["supported"] not in frame.columns:
        missing.append("verdicts")
    if missing:
        raise InputError(
            f"{spec!r} is not a scored table (no column {', '.join(missing)}): give a warehouse folder or the "
            f"output of `faithfulness-pipeline score`"
        )
    source = timestamp_column if timestamp_column in frame.columns else "scored_at"
    return frame.with_columns(day_of(frame, source, timezone).alias(DAY))


def day_of(frame: pl.DataFrame, column: str, timezone: str) -> pl.Expr:
    """The local date in ``timezone`` of a datetime (naive = UTC), date or ISO-8601 text column."""
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
    raise InputError(f"column {column!r} holds {dtype}, not a timestamp: name another with --timestamp-col")


def load_calibration(spec: str | None, warehouse: Place | None) -> pl.DataFrame | None:
    """The judge's calibration table when one is given or the warehouse has one; None otherwise."""
    if spec:
        return pl.concat([_read_table(f) for f in resolve_inputs(spec)], how="diagonal_relaxed")
    if warehouse is None:
        return None
    for table in CALIBRATION_TABLES:
        folder = warehouse.child(table)
        files = _warehouse_files(warehouse, table) or [
            f for f in folder.files(".parquet") if f.parent().path == folder.path
        ]
        if files:
            return pl.concat([_read_table(f.uri) for f in files], how="diagonal_relaxed")
    return None


def _language(frame: pl.DataFrame, column: str, answer_column: str) -> pl.Expr:
    """The row's language column, else the answer's script (Hangul: ko, Han: zh, else other)."""
    if column in frame.columns:
        return pl.col(column).cast(pl.String).fill_null("(none)")
    if ANSWER_SCRIPT in frame.columns:
        return pl.col(ANSWER_SCRIPT)
    if answer_column not in frame.columns:
        return pl.lit("(unknown)")
    return _script(pl.col(answer_column))


#: The rows of these keys with the named columns (``rows_of`` bound to the report's source).
FullRows = Callable[[list[str], Sequence[str]], dict[str, dict[str, Any]]]


def _worst(scored: pl.DataFrame, limit: int, *, model_column: str, answer_column: str, question_column: str,
           language: pl.Expr, full: FullRows | None = None) -> list[dict[str, Any]]:
    # Lazy, so that sort + head is a top-k: sorting the frame itself would copy every row first.
    ranked = scored.lazy().filter(pl.col("hallucination_score").is_not_null()).sort(
        ["hallucination_score", "faithfulness_score", "row_key"], descending=[True, False, False], nulls_last=True
    ).head(limit).collect()

    def text(column: str) -> pl.Expr:
        return pl.col(column).cast(pl.String) if column in ranked.columns else pl.lit(None, dtype=pl.String)

    rows = ranked.select(
        "row_key", DAY, text(model_column).alias("model"), language.alias("language"),
        text(question_column).alias("question"), text(answer_column).alias("answer"),
        "hallucination_score", "faithfulness_score",
        pl.col("verdicts") if "verdicts" in ranked.columns else pl.lit(None).alias("verdicts"),
    ).to_dicts()
    if full is not None:  # the table holds light verdicts and no texts: the worst rows' are read now
        complete = full([row["row_key"] for row in rows], ("verdicts", answer_column, question_column))
        for row in rows:
            found = complete.get(row["row_key"], {})
            row["verdicts"] = found.get("verdicts") or []
            for name, column in (("answer", answer_column), ("question", question_column)):
                if row[name] is None and found.get(column) is not None:
                    row[name] = str(found[column])
    for row in rows:
        claims = []
        for verdict in row.pop("verdicts") or []:
            mark = "contradicted" if verdict["verdict"] == "contradicted" else (
                "speculative" if verdict["speculative"] else verdict["verdict"])
            claims.append({**verdict, "mark": mark})
        row["claims"] = claims
    return rows


def summarise(
    scored: pl.DataFrame,
    *,
    source: str,
    scoring: ScoringSettings,
    language_column: str = "language",
    worst: int = 20,
    calibration: pl.DataFrame | None = None,
    full_rows: FullRows | None = None,
) -> ReportData:
    """Reduce a scored table (with a ``day`` column) to what the report draws; ``scoring`` names its columns,
    the hallucination threshold and the scale."""
    model_column, answer_column = scoring.model_column, scoring.output_column
    threshold = scoring.hallucination_threshold
    daily = daily_aggregates(scored, day_column=DAY, model_column=model_column, hallucination_threshold=threshold,
                             scale=scoring.scale)
    ok = scored.filter(pl.col("status") == "ok")
    language = _language(scored, language_column, answer_column)
    mix = _verdict_mix(ok, language)
    per_answer = ok.group_by(pl.col("n_claims").cast(pl.Int64)).len("answers").sort("n_claims")
    judges = (
        scored.group_by(pl.col("judge_model").fill_null("-"), pl.col("prompt_version").fill_null("-"))
        .len("rows").sort("judge_model", "prompt_version").rows()
    )
    return ReportData(
        source=source,
        scored_rows=scored.height,
        daily=daily,
        hallucination=ok.get_column("hallucination_score").drop_nulls().to_list(),
        faithfulness=ok.get_column("faithfulness_score").drop_nulls().to_list(),
        verdict_mix=mix,
        claims_per_answer=per_answer,
        worst=_worst(scored, worst, model_column=model_column, answer_column=answer_column,
                     question_column=scoring.input_column, language=language, full=full_rows),
        judges=[(str(m), str(p), int(n)) for m, p, n in judges],
        threshold=threshold,
        scale=scoring.scale,
        calibration=calibration,
        warnings=[w for w in [_claimless(scored, answer_column).warning(scoring.max_zero_claim_share)] if w],
        comparisons=model_differences(scored, model_column, threshold, language_column),
    )


def _claimless(scored: pl.DataFrame, answer_column: str) -> Claimless:
    """:func:`count_claimless` of a table read with its answers' word counts instead of their text."""
    words = pl.col(ANSWER_WORDS) if ANSWER_WORDS in scored.columns else None
    return count_claimless(scored, answer_column, words=words)


def _verdict_mix(ok: pl.DataFrame, language: pl.Expr) -> pl.DataFrame:
    """Claims per language and mark, from the verdicts or from the per-row mark counts :func:`_read` kept."""
    counted = ok if MARK_COUNTS["supported"] in ok.columns else ok.with_columns(_marked(m) for m in MARK_COUNTS)
    mix = (
        counted.group_by(language.alias("language")).agg(pl.col(c).sum() for c in MARK_COUNTS.values())
        .unpivot(index="language", variable_name="mark", value_name="claims")
        .with_columns(pl.col("mark").replace({v: k for k, v in MARK_COUNTS.items()}),
                      pl.col("claims").cast(pl.UInt32))
        .filter(pl.col("claims") > 0)
        .sort("language", "mark")
    )
    return mix if mix.height else pl.DataFrame(schema={"language": pl.String, "mark": pl.String,
                                                        "claims": pl.UInt32})
