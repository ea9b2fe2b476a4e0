"""``faithfulness-pipeline calibrate``: how far the judge agrees with people, from the command line. The
calibration itself is ``faithfulness_pipeline.api.calibration``, which the Dagster asset runs too."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from faithfulness_pipeline.cli.options import resolve_settings, setting_options
from faithfulness_pipeline.cli.streams import unfailing_streams
from faithfulness_pipeline.core.errors import FaithfulnessPipelineError
from faithfulness_pipeline.settings.calibration import CalibrationSettings
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.settings.scoring import ScoringSettings
from faithfulness_pipeline.tables.command_outputs import check_command_outputs, write_frames


@click.command()
@click.option("--scored", "scored_specs", multiple=True,
              help="A scored table holding the labelled rows (repeatable: two or more compare judges). "
              "None: the labelled rows are scored here with the judge the settings name.")
@click.option("-o", "--output", default=None, help="Write the calibration table (Parquet).")
@click.option("--disagreements-out", default=None, help="Write the rows where the judges disagree (Parquet).")
@setting_options(JudgeSettings, ScoringSettings, CalibrationSettings)
@unfailing_streams()
def calibrate(scored_specs: tuple[str, ...], output: str | None, disagreements_out: str | None,
              **options: Any) -> None:
    """How far the judge agrees with people: score --labelled rows (or take --scored tables) and compare.

    Prints the calibration table; exits 1 when a judge is below --agreement-floor and --below-floor is fail.
    """
    from faithfulness_pipeline.api import calibration as cal

    try:
        judge_settings, scoring = resolve_settings(options, os.environ)
        calibration = cal.calibration_settings(options, os.environ)
        check_command_outputs({"-o": output, "--disagreements-out": disagreements_out},
                            [calibration.labelled, calibration.claim_labelled, *scored_specs])
        text = scoring.columns().key_columns()
        labelled = cal.read_table(str(calibration.labelled), text)
        scored = [(spec, cal.read_table(spec, text)) for spec in scored_specs]
        result = cal.run(labelled, scored, scoring, calibration, judge_settings, cal.read_claim_labels(calibration))
        write_frames({"-o": (output, result.table), "--disagreements-out": (disagreements_out, result.disagreements)})
    except FaithfulnessPipelineError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    click.echo(cal.report(result))
    if result.problems and calibration.below_floor == "fail":
        sys.exit(1)
