"""judging/llm."""
