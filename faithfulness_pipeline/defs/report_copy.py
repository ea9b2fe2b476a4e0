"""The tables the HTML report reads, copied out of a warehouse in the postgres table format as a Parquet
warehouse (``<folder>/<table>/ds=<day>/data.parquet``): the report (``faithfulness_pipeline.report``) reads
Parquet. Chunk by chunk (no day is held whole); the copy takes as much disk as those tables' current rows."""

from __future__ import annotations

from faithfulness_pipeline.report.data import CALIBRATION_TABLES, CORRECTED_TABLE
from faithfulness_pipeline.tables.parquet_tables import ParquetTables
from faithfulness_pipeline.tables.postgres_tables import SCAN_BATCH, PostgresTables
from faithfulness_pipeline.tables.storage import Place

#: What the report reads of a warehouse: the scored rows, the corrected figures, the judge's calibration.
REPORT_TABLES = ("scored_conversations", CORRECTED_TABLE, *CALIBRATION_TABLES)


def parquet_copy(tables: PostgresTables, folder: str) -> str:
    """Copies the current rows of the report's tables into ``folder``; returns it, as the report's source."""
    copy = ParquetTables(Place.of(folder))
    for table in REPORT_TABLES:
        for partition in tables.partitions(table):
            with copy.writer(table, partition, tables.schema(table, partition)) as sink:
                for frame in tables.batches(table, partition, SCAN_BATCH):  # the format's own bound
                    sink.write(frame)
    return folder
