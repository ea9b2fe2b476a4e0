"""judging/offline."""
