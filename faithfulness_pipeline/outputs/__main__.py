"""``python -m faithfulness_pipeline.outputs``: print the docs' table of outputs."""

import sys

from faithfulness_pipeline.outputs.docs_table import markdown_table

sys.stdout.write(markdown_table() + "\n")
