"""Reading and writing tables: local folders and object stores, Parquet, JSON Lines and CSV, a run's output files.

Files in, polars frames out, and back: the scoring ``core`` below it reads and writes no file."""
