"""``faithfulness-pipeline packing-study``: does packing cost agreement with people on this judge? The study
itself is ``faithfulness_pipeline.api.packing_study``; ``bench/judge_quality.py`` runs it on the shared dev set."""

from __future__ import annotations

import asyncio
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

_SHAPES = "single,packed,shuffled,repeat"


@click.command("packing-study")
@click.option("--shapes", default=_SHAPES, show_default=True,
              help="Verdict shapes to run (single is the reference and always runs).")
@click.option("--rows", "max_rows", type=click.IntRange(min=1), default=None,
              help="Judge at most this many labelled rows, taken evenly across languages (and sources).")
@click.option("--shuffle-seed", type=int, default=1, show_default=True, help="Order of the rows in the shuffled shape.")
@click.option("-o", "--output", default=None, help="Write every shape's per-row scores and verdicts (Parquet).")
@setting_options(JudgeSettings, ScoringSettings, CalibrationSettings)
@unfailing_streams()
def packing_study(shapes: str, max_rows: int | None, shuffle_seed: int, output: str | None, **options: Any) -> None:
    """Judge --labelled rows one answer per request and packed (and packed in another order, and packed
    again), on the same claims, and print how far each shape agrees with people, how many verdicts packing
    flips against the model's own run-to-run noise, and what each shape cost. Needs --model: every shape is
    paid for (no result store)."""
    from faithfulness_pipeline.api import calibration as cal
    from faithfulness_pipeline.api import packing_study as study
    from faithfulness_pipeline.core.calibration import CalibrationConfig
    from faithfulness_pipeline.core.errors import ConfigError
    from faithfulness_pipeline.judging.factory import make_judge

    try:
        judge_settings, scoring = resolve_settings(options, os.environ)
        calibration = cal.calibration_settings(options, os.environ)
        if not judge_settings.model:
            raise ConfigError("packing-study compares request shapes of an LLM judge: give --model (the offline "
                              "judge sends no requests)")  # fmt: skip
        check_command_outputs({"-o": output}, [calibration.labelled])
        labelled = cal.read_table(str(calibration.labelled), scoring.columns().key_columns())
        if max_rows is not None:
            labelled = study.stratified(labelled, max_rows)
        config = CalibrationConfig(threshold=scoring.hallucination_threshold, scale=scoring.scale,
                                   group_columns=calibration.groups(), bootstrap=calibration.bootstrap,
                                   seed=calibration.bootstrap_seed)  # fmt: skip
        chosen = tuple(s.strip() for s in shapes.split(",") if s.strip())
        result = asyncio.run(study.run_study(
            labelled, judge_settings, make_judge, scoring=scoring.config(), calibration=config, shapes=chosen,
            shuffle_seed=shuffle_seed, progress=lambda step: click.echo(f"packing-study: {step}", err=True),
        ))  # fmt: skip
        write_frames({"-o": (output, result.rows)})
    except FaithfulnessPipelineError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    click.echo(study.markdown(result))
