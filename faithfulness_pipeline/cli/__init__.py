"""``faithfulness-pipeline``: the command group. Each command (``score``, ``calibrate``, ``report``, ``demo``,
``packing-study``, ``compare``, ``estimate``, the ``review`` group) is a module of its own; this one only
gathers them."""

from __future__ import annotations

import click

# The modules, not their commands: importing ``score`` from ``cli.score`` here would hide the module
# ``faithfulness_pipeline.cli.score`` behind the command of the same name (for ``import ... as``, mock.patch).
from faithfulness_pipeline.cli import calibrate, compare, demo, estimate, packing_study, report, review, score


@click.group()
@click.version_option(package_name="faithfulness-pipeline")
def main() -> None:
    """Hallucination and faithfulness scores (Mastra semantics) for tables of LLM answers."""


main.add_command(score.score)
main.add_command(calibrate.calibrate)
main.add_command(report.report)
main.add_command(demo.demo)
main.add_command(packing_study.packing_study)
main.add_command(compare.compare_command, name="compare")
main.add_command(estimate.estimate)
main.add_command(review.review, name="review")
