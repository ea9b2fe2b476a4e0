"""judging/llm/batch."""
