"""The pure scoring core: polars in, polars out. Imports neither dagster nor litellm."""
