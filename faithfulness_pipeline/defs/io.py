"""The IO manager: polars frames <-> Parquet partitions of the warehouse.

One file per asset partition, ``<root>/<asset>/ds=<day>/data.parquet`` (hive layout, so DuckDB, polars,
Spark and BI tools read the day as a column). Writing swaps a complete file in atomically, so
re-materialising a partition replaces exactly that partition: no duplicates, no leftovers, and a
reader never sees half a file. (dagster-polars does not work with polars 2; this is the small
replacement.)
"""

from __future__ import annotations

import dagster as dg
import polars as pl

from faithfulness_pipeline.defs.metadata import table_metadata
from faithfulness_pipeline.defs.resources import WarehouseResource


def _table(key: dg.AssetKey) -> str:
    return "/".join(key.path)


class WarehouseIOManager(dg.ConfigurableIOManager):
    """Stores every asset as hive-partitioned Parquet under the warehouse root."""

    warehouse: WarehouseResource

    def handle_output(self, context: dg.OutputContext, obj: pl.DataFrame) -> None:
        partition = context.partition_key if context.has_partition_key else None
        table = _table(context.asset_key)
        path = self.warehouse.write(table, partition, obj)
        context.add_output_metadata({**table_metadata(obj, table), "path": dg.MetadataValue.path(str(path))})

    def load_input(self, context: dg.InputContext) -> pl.DataFrame:
        upstream = context.upstream_output
        key = upstream.asset_key if upstream is not None else context.asset_key
        partitions = list(context.asset_partition_keys) if context.has_asset_partitions else None
        return self.warehouse.read(_table(key), partitions)
