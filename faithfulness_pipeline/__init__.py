"""faithfulness_pipeline: Mastra-compatible hallucination and faithfulness scores for tables of LLM answers.

Public API (everything else is internal)::

    from faithfulness_pipeline import score_frame, ScoringConfig, ColumnMap, Judge
"""

from faithfulness_pipeline.api import default_judge, score_frame
from faithfulness_pipeline.core.config import ColumnMap, ScoringConfig
from faithfulness_pipeline.core.errors import ConfigError, FaithfulnessPipelineError, InputError
from faithfulness_pipeline.core.judge import Judge

__all__ = [
    "ColumnMap",
    "ConfigError",
    "FaithfulnessPipelineError",
    "InputError",
    "Judge",
    "ScoringConfig",
    "default_judge",
    "score_frame",
]
