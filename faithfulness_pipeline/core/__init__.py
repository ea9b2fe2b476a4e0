"""The pure scoring core: polars in, polars out. Reads and writes no file (``tables`` does); imports neither
dagster nor litellm."""
