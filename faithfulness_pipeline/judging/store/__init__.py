"""judging/store."""
