"""``faithfulness-pipeline report SOURCE -o report.html``: the answer-quality report from the command line.

A leaf like the other command modules (``cli/__init__.py`` only adds it to its group). The column and
threshold settings are the scoring settings (``ScoringSettings``): their flags and ``FP_*`` variables are
derived, not declared here.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import click

from faithfulness_pipeline.cli.streams import unfailing_streams
from faithfulness_pipeline.cli.warehouse import as_of_option, open_warehouse, warehouse_options
from faithfulness_pipeline.core.errors import FaithfulnessPipelineError
from faithfulness_pipeline.settings.derive import from_env, settings
from faithfulness_pipeline.settings.scoring import ScoringSettings
from faithfulness_pipeline.tables.command_outputs import check_command_outputs
from faithfulness_pipeline.tables.storage import StorageError, describe
from faithfulness_pipeline.traces.urls import scrubbed

#: The scoring settings the report uses (which columns hold what; the threshold and scale of the scores).
REPORT_SETTINGS = ("model_column", "output_column", "input_column", "hallucination_threshold", "scale",
                   "max_zero_claim_share")
#: The day boundary's time zone for a scored table's timestamps (the Dagster layer reads the same variable).
TIMEZONE_ENV = "FP_TIMEZONE"


def _options(command: Callable[..., None]) -> Callable[..., None]:
    for setting in reversed([s for s in settings(ScoringSettings) if s.name in REPORT_SETTINGS]):
        kind = {int: int, float: float, str: str}.get(setting.kind)
        help_text = f"{setting.description}. [default: {setting.default}] [env {setting.env}]"
        command = click.option(setting.flag, setting.name, type=kind, default=None, help=help_text)(command)
    return command


@click.command("report")
@click.argument("source", metavar="[WAREHOUSE_OR_SCORED_TABLE]", required=False)
@click.option("-o", "--output", required=True,
              help="HTML file to write, a path or an s3:// (gs://, abfs://) URI (self-contained: mail it, open it "
              "offline).")
@click.option("--calibration", default=None, help="The judge's calibration table (Parquet) to show. Default: the "
              "warehouse's judge_calibration table when there is one.")
@click.option("--timestamp-col", default=None,
              help="Column whose date is a scored table's day; a warehouse uses its days. [default: created_at, "
              "or scored_at where a table has no created_at]")
@click.option("--timezone", default=None, help=f"Time zone of the day boundary [default: UTC] [env {TIMEZONE_ENV}].")
@click.option("--worst", default=20, show_default=True, type=click.IntRange(0, 1000),
              help="How many of the worst answers to show with their claims.")
@as_of_option("--as-of")
@_options
@warehouse_options
@unfailing_streams()
def report(source: str | None, output: str, calibration: str | None, timestamp_col: str | None,
           timezone: str | None, worst: int, as_of: str | None, **options: Any) -> None:
    """Write the answer-quality report of a warehouse or a scored table (Parquet file, folder or glob), local or
    in an object store (s3://bucket/warehouse). A warehouse is read in its table format (--table-format: parquet,
    delta, iceberg, postgres); without an argument, the warehouse FP_WAREHOUSE names. --as-of reports the scored
    table as a past materialisation published it (then without the corrected figures and the warehouse's
    calibration, which have versions of their own)."""
    from faithfulness_pipeline.judging.catalog import baseline_judges
    from faithfulness_pipeline.report import build_report_to, headline

    started = time.monotonic()
    try:
        given = {k: v for k, v in options.items() if v is not None and k in REPORT_SETTINGS}
        scoring = from_env(ScoringSettings, os.environ, given)
        zone = timezone or os.environ.get(TIMEZONE_ENV) or "UTC"
        where, tables = open_warehouse(source, options, os.environ, as_of)
        check_command_outputs({"-o": output}, [where, calibration] if tables is None else [calibration])
        place, data = build_report_to(
            where,
            output,
            baseline_judges=baseline_judges(),
            calibration=calibration,
            timestamp_column=timestamp_col or "created_at",
            timestamp_required=timestamp_col is not None,
            timezone=checked_zone(zone),
            scoring=scoring,
            worst=worst,
            tables=tables,
        )
    except StorageError as exc:  # a URI that names no place (a scheme, credentials in it): the command's fault
        click.echo(f"error: {scrubbed(str(exc))}", err=True)
        sys.exit(2)
    except (FaithfulnessPipelineError, OSError) as exc:
        click.echo(f"error: {scrubbed(describe(exc))}", err=True)
        sys.exit(2)
    top = headline(data)
    click.echo(
        f"wrote {place.uri} ({place.size() / 1024:.0f} KiB) in {time.monotonic() - started:.1f}s: "
        f"{top.answers} answers over {top.period}"
        + (f" ({top.undated_answers} with no date: their own 'undated' rows)" if top.undated_answers else "")
        + f", judged by {top.judges}",
        err=True,
    )


def checked_zone(name: str) -> str:
    """``name`` when it is an IANA time zone, else a usage error naming the flag and the variable."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from faithfulness_pipeline.core.errors import ConfigError

    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"--timezone / {TIMEZONE_ENV} {name!r} is not a time zone name (e.g. UTC, "
                          f"Europe/Berlin, Asia/Seoul)") from None
    return name
