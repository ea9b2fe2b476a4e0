"""``faithfulness-pipeline review``: people's review of the judge. ``review sample SCORED... -o QUEUE`` draws
the audit sample people label from scored tables (``core.audit``) and writes it as a review queue, the table
the Dagster asset ``review_queue`` holds for a day (``outputs.review_queue``; docs/review.md). The group's
other commands (``serve``, ``import``, ``agreement``: the labels) are ``cli.review_labels``'.

Only the light columns of the scored tables are read (keys, ids, status, model, language, time, lineage):
never the answers, claims or verdicts. The column settings are the scoring settings' (their flags and
``FP_*`` variables are derived, as the report's are); the size is ``ReviewSettings.review_sample_size``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, Final

import click
import polars as pl

from faithfulness_pipeline.cli.options import resolved
from faithfulness_pipeline.cli.report import TIMEZONE_ENV, checked_zone
from faithfulness_pipeline.cli.review_labels import agreement_command, import_command, serve_command
from faithfulness_pipeline.cli.review_sizing import size_for
from faithfulness_pipeline.cli.streams import unfailing_streams
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.audit import NOT_ELIGIBLE, ROWS, STRATUM, STRATUM_ROWS, STRATUM_SAMPLE, AuditPlan
from faithfulness_pipeline.core.errors import FaithfulnessPipelineError, InputError
from faithfulness_pipeline.outputs.kinds import DAY, OutputContext
from faithfulness_pipeline.outputs.review_queue import REVIEW_QUEUE, review_sample
from faithfulness_pipeline.report.data import day_of
from faithfulness_pipeline.settings.derive import from_env, settings
from faithfulness_pipeline.settings.labels import LabelSettings
from faithfulness_pipeline.settings.review import ReviewSettings
from faithfulness_pipeline.settings.scoring import ScoringSettings
from faithfulness_pipeline.tables.inputs import resolve_inputs
from faithfulness_pipeline.tables.output_files import OutputError, check_outputs, committed_together
from faithfulness_pipeline.tables.read import file_schema, read_columns
from faithfulness_pipeline.tables.write import ParquetChunkWriter

#: The scoring settings that name the columns the queue keeps (the answering model and the answer's ids).
COLUMN_SETTINGS: Final = ("id_column", "turn_column", "key_column", "model_column")
#: Strata shown line by line; the queue's stratum columns hold every one.
_SHOWN_STRATA: Final = 40
#: The queue's size: the review settings' one field, whose flag ``--size`` shortens.
_SIZE: Final = next(s for s in settings(ReviewSettings) if s.name == "review_sample_size")
#: People's labels so far (the corrected figures' setting), which size a sample by the judge's agreement.
_LABELS: Final = next(s for s in settings(LabelSettings) if s.name == "labels")


def _column_options(command: Callable[..., None]) -> Callable[..., None]:
    for setting in reversed([s for s in settings(ScoringSettings) if s.name in COLUMN_SETTINGS]):
        help_text = f"{setting.description}. [default: {setting.default}] [env {setting.env}]"
        command = click.option(setting.flag, setting.name, default=None, help=help_text)(command)
    return command


@click.group()
def review() -> None:
    """People's review of the judge: the random audit sample they label, the page they label it on, their
    labels brought in from elsewhere and their agreement (docs/review.md)."""


review.add_command(serve_command)
review.add_command(import_command)
review.add_command(agreement_command)


@review.command("sample")
@click.argument("scored", nargs=-1, required=True, metavar="SCORED...")
@click.option("-o", "--output", required=True, metavar="QUEUE",
              help="The review queue to write (Parquet): a path or an s3:// (gs://, abfs://) URI.")
@click.option("--size", _SIZE.flag, _SIZE.name, default=None, metavar="INTEGER",
              help=f"Answers in the queue in all, shared out over the strata. [default: {_SIZE.default}] "
              f"[env {_SIZE.env}]")
@click.option("--timestamp-col", default="created_at", show_default=True,
              help="Column whose date is a row's day (scored_at when a table has none), as for the report.")
@click.option("--timezone", default=None, help=f"Time zone of the day boundary [default: UTC] [env {TIMEZONE_ENV}].")
@click.option("--language-col", default="language", show_default=True,
              help="Column of the answer's language (a table without it: one language).")
@click.option("--half-width", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Size each stratum for a 95 % interval of this half-width on its corrected share over the "
              "threshold (instead of --size), at the judge's agreement measured on --labels (without labels: the "
              "labels-alone bound).")
@click.option(_LABELS.flag, _LABELS.name, default=None, metavar="PATH",
              help=f"With --half-width: people's labels so far, to measure the judge's agreement. [env {_LABELS.env}]")
@_column_options
def sample(scored: tuple[str, ...], output: str, review_sample_size: str | None, timestamp_col: str,
           timezone: str | None, language_col: str, half_width: float | None, labels: str | None,
           **columns: Any) -> None:
    """Draw the audit sample people label from SCORED (scored tables: Parquet files, folders, globs or URIs)
    and write it to QUEUE: --size answers in all, over the strata of day x model x language, among the answers
    the judge scored (status ok), each with its inclusion probability and without its scores."""
    with unfailing_streams():
        try:
            given = {k: v for k, v in columns.items() if v is not None}
            scoring = from_env(ScoringSettings, os.environ, given)
            size = resolved(ReviewSettings, {_SIZE.name: review_sample_size}, os.environ).review_sample_size
            context = OutputContext(
                model_column=scoring.model_column, id_column=scoring.id_column, turn_column=scoring.turn_column,
                key_column=scoring.key_column, language_column=language_col, timestamp_column=timestamp_col,
                timezone=checked_zone(timezone or os.environ.get(TIMEZONE_ENV) or "UTC"), review_sample_size=size,
            )
            files = list(dict.fromkeys(f for spec in scored for f in resolve_inputs(spec)))
            check_outputs({"-o": output}, files)
            rows = _light_rows(files, context, with_scores=half_width is not None)
            sizing = None
            if half_width is not None:
                if review_sample_size is not None:
                    raise click.UsageError("give --size or --half-width, not both")
                prior = resolved(LabelSettings, {"labels": labels}, os.environ).labels
                sizing = size_for(half_width, rows, prior, scoring)
            drawn = review_sample(rows.drop("hallucination_score", strict=False), context,
                                  None if sizing is None else sizing.per_stratum)
            if drawn.plan.eligible == 0:
                raise InputError(f"no answer of {' '.join(scored)} was scored (status ok): {_statuses(drawn.plan)}; "
                                 f"nothing to review")
            with committed_together({"-o": output}) as tmps:
                writer = ParquetChunkWriter(tmps["-o"])
                writer.write(drawn.rows)
                writer.close()
        except OutputError as exc:  # the machine's fault (a full disk, a read-only folder), not the command's
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except FaithfulnessPipelineError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        if sizing is not None:
            click.echo(sizing.line)
        click.echo(render(drawn.plan))
        click.echo(f"wrote {output}")


def _light_rows(files: list[str], context: OutputContext, *, with_scores: bool = False) -> pl.DataFrame:
    """The columns the queue reads of every file, each row with its day (the report's: the date of the
    timestamp column in the time zone, else of ``scored_at``); ``with_scores``: the hallucination score too
    (to size the sample; the queue never holds it)."""
    frames = []
    for file in files:
        present = file_schema(file).names()
        missing = [c for c in (S.ROW_KEY, "status") if c not in present]
        if missing:
            raise InputError(f"{file!r} has no column {', '.join(missing)}: give scored tables (the output of "
                             f"`faithfulness-pipeline score`)")
        when = next((c for c in (context.timestamp_column, "scored_at") if c in present), None)
        if when is None:
            raise InputError(f"{file!r} has neither {context.timestamp_column!r} nor scored_at: name the column of "
                             f"the rows' times with --timestamp-col")
        wanted = REVIEW_QUEUE.reads(present, context)
        if with_scores and "hallucination_score" in present:
            wanted = [*wanted, "hallucination_score"]
        rows = read_columns(file, list(dict.fromkeys([*wanted, when])))
        frames.append(rows.with_columns(day_of(rows, when, context.timezone).alias(DAY)).select(*wanted, DAY))
    return pl.concat(frames, how="diagonal_relaxed")


def _statuses(plan: AuditPlan) -> str:
    totals = plan.strata.select(ROWS, STRATUM_ROWS, *NOT_ELIGIBLE).sum().row(0, named=True)
    others = ", ".join(f"{totals[name]} {name}" for name in NOT_ELIGIBLE)
    return f"{totals[ROWS]} rows, {totals[STRATUM_ROWS]} scored (ok), {others}"


def _stratum_line(row: dict[str, Any]) -> str:
    left_out = ", ".join(f"{row[name]} {name}" for name in NOT_ELIGIBLE if row[name])
    return f"  {row[STRATUM]}  {row[STRATUM_SAMPLE]} of {row[STRATUM_ROWS]}" + (f"  ({left_out})" if left_out else "")


def render(plan: AuditPlan) -> str:
    """The draw in a few lines: how many of how many, the strata (drawn of eligible, and what was not
    eligible), and when the size could not give each stratum its minimum."""
    lines = [f"review queue: {plan.drawn} of {plan.eligible} scored answers drawn (size {plan.size}, at least "
             f"{plan.minimum} per stratum where it has them)",
             f"read {_statuses(plan)}; {plan.strata.height} strata (day, model, language), drawn of scored:"]
    lines += [_stratum_line(row) for row in plan.strata.head(_SHOWN_STRATA).iter_rows(named=True)]
    if plan.strata.height > _SHOWN_STRATA:
        lines.append(f"  ... and {plan.strata.height - _SHOWN_STRATA} more strata (the queue's stratum column)")
    if plan.size >= plan.eligible:
        lines.append(f"size {plan.size} >= the {plan.eligible} scored answers: every one is drawn (probability 1)")
    short = plan.short_of_minimum()
    if short.height:
        lines.append(f"size {plan.size} cannot give every stratum {plan.minimum}: {short.height} strata got fewer "
                     f"(the larger strata got theirs first); a stratum without a row has no estimate")
    return "\n".join(lines)
