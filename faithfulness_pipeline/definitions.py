"""The Dagster code location (``dg dev``, ``dg launch``): the definitions built from ``FP_*`` environment variables.

Everything lives in :mod:`faithfulness_pipeline.defs`; see its docstring for the variables.
"""

from faithfulness_pipeline.defs import DefsSettings, build_defs

defs = build_defs(DefsSettings.from_env())
