from typing import Any

import pandas as pd
from dagster import ConfigurableIOManager, ConfigurableResource, InputContext, MetadataValue, OutputContext

from evalpipe.config import warehouse_path
from evalpipe.schema import ASSET_TABLES
from evalpipe.warehouse import Warehouse
from partitions import partition_dims


class WarehouseResource(ConfigurableResource):
    """The DuckDB warehouse. Empty `path`: `EVALS_WAREHOUSE`, else `$DAGSTER_HOME/warehouse.duckdb`."""

    path: str = ""

    def get(self) -> Warehouse:
        return Warehouse(self.path or warehouse_path())


def _dims(context: Any) -> dict[str, str]:
    if not context.has_asset_partitions:
        return {}
    return partition_dims(context.asset_partition_key)


class WarehouseIOManager(ConfigurableIOManager):
    """Stores each asset partition as one Parquet file, atomically, and keeps DuckDB views over them.
    Safe with many writer processes and open read-only DuckDB connections (see evalpipe/warehouse.py)."""

    warehouse: WarehouseResource

    def handle_output(self, context: OutputContext, obj: pd.DataFrame) -> None:
        table = ASSET_TABLES[context.asset_key.path[-1]]
        path = self.warehouse.get().write(table, obj, _dims(context))
        context.add_output_metadata({"warehouse_table": table, "partition_file": MetadataValue.path(str(path))})

    def load_input(self, context: InputContext) -> pd.DataFrame:
        table = ASSET_TABLES[context.asset_key.path[-1]]
        return self.warehouse.get().read(table, _dims(context))
