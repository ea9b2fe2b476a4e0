"""``python -m faithfulness_pipeline.settings``: print the settings table of the docs."""

import sys

from faithfulness_pipeline.settings.derive import markdown_table

sys.stdout.write(markdown_table() + "\n")
