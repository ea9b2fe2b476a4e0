"""The IO managers: small polars frames <-> Parquet files of the warehouse, and the handoffs between steps.

The daily tables stream through the warehouse themselves (``defs.warehouse``: no day is held in memory);
this manager serves the small ones that pass as frames (the labelled rows and the calibration table), one
file per asset (partition), swapped in atomically. (dagster-polars does not work with polars 2; this is
the small replacement.) What one step hands the next that is no table (a shard's summary) is pickled by
Dagster's own filesystem IO manager under ``STEP_IO``: in the instance's storage folder here; with a
Kubernetes or Celery executor, point it at storage every pod sees (``dagster_aws``'s S3 pickle IO
manager, for example).
"""

from __future__ import annotations

import dagster as dg
import polars as pl

from faithfulness_pipeline.defs.metadata import table_metadata
from faithfulness_pipeline.defs.warehouse import WarehouseResource

#: The IO manager of what steps hand each other that is no table.
STEP_IO = "step_io_manager"


def _table(key: dg.AssetKey) -> str:
    return "/".join(key.path)


class WarehouseIOManager(dg.ConfigurableIOManager):
    """Stores every asset as a table of the warehouse (one partition per day), in its table format."""

    warehouse: WarehouseResource

    def handle_output(self, context: dg.OutputContext, obj: pl.DataFrame) -> None:
        partition = context.partition_key if context.has_partition_key else None
        table = _table(context.asset_key)
        where = self.warehouse.write(table, partition, obj)
        context.add_output_metadata({**table_metadata(obj.schema, table, obj.height),
                                     "path": dg.MetadataValue.path(where)})

    def load_input(self, context: dg.InputContext) -> pl.DataFrame:
        upstream = context.upstream_output
        key = upstream.asset_key if upstream is not None else context.asset_key
        partitions = list(context.asset_partition_keys) if context.has_asset_partitions else None
        return self.warehouse.read(_table(key), partitions)
