"""``python -m faithfulness_pipeline.cli``: the ``faithfulness-pipeline`` command."""

from faithfulness_pipeline.cli import main

main()
