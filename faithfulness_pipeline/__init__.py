"""faithfulness_pipeline: Mastra-compatible hallucination and faithfulness scores for tables of LLM answers.

Public API (everything else is internal)::

    from faithfulness_pipeline import score_frame, score_frame_async, ScoringConfig, ColumnMap, Judge
    from faithfulness_pipeline import JudgeSettings, make_judge      # the litellm judge from Python
    from faithfulness_pipeline import compare_scored                 # two scorings side by side
"""

from faithfulness_pipeline.api import default_judge, score_frame, score_frame_async
from faithfulness_pipeline.api.compare import compare_scored
from faithfulness_pipeline.core.config import ColumnMap, ScoringConfig
from faithfulness_pipeline.core.errors import ConfigError, FaithfulnessPipelineError, InputError
from faithfulness_pipeline.core.port import Judge
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.settings.judge import JudgeSettings

__all__ = [
    "ColumnMap",
    "ConfigError",
    "FaithfulnessPipelineError",
    "InputError",
    "Judge",
    "JudgeSettings",
    "ScoringConfig",
    "compare_scored",
    "default_judge",
    "make_judge",
    "score_frame",
    "score_frame_async",
]
