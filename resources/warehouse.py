from typing import Any

from dagster import ConfigurableIOManager, ConfigurableResource, InputContext, MetadataValue, OutputContext

from evalpipe.core.config import warehouse_path
from evalpipe.core.schema import ASSET_TABLES
from evalpipe.store.warehouse import PartitionReader, Warehouse
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


def _wants_reader(context: InputContext) -> bool:
    typ = getattr(context.dagster_type, "typing_type", None)
    return isinstance(typ, type) and issubclass(typ, PartitionReader)


class WarehouseIOManager(ConfigurableIOManager):
    """Stores each asset partition as one Parquet file, atomically, and keeps DuckDB views over them.
    Safe with many writer processes and open read-only DuckDB connections (see evalpipe/store/warehouse.py).

    Streaming (docs/scale.md): an asset that wrote its partition batch by batch itself (`Warehouse.writer`) returns
    the `PartitionReader` of what it wrote, and nothing is written again here. An input annotated
    `PartitionReader` gets the partition lazily (batches of the columns asked for); an input annotated
    `pd.DataFrame` gets it whole, or only the columns listed in the input's metadata (`AssetIn(metadata={"columns":
    [...]})`)."""

    warehouse: WarehouseResource

    def handle_output(self, context: OutputContext, obj: Any) -> None:
        table = ASSET_TABLES[context.asset_key.path[-1]]
        if isinstance(obj, PartitionReader):  # written batch by batch by the asset itself
            path = obj.path
        else:
            path = self.warehouse.get().write(table, obj, _dims(context))
        context.add_output_metadata({"warehouse_table": table, "partition_file": MetadataValue.path(str(path))})

    def load_input(self, context: InputContext) -> Any:
        if context.has_asset_partitions and len(context.asset_partition_keys) > 1:
            return None  # [sweeps] a ranged run's first step reads each partition itself (eval_assets/batch.py)
        table = ASSET_TABLES[context.asset_key.path[-1]]
        reader = self.warehouse.get().reader(table, _dims(context))
        if _wants_reader(context):
            return reader
        columns = (context.definition_metadata or {}).get("columns")
        return reader.to_pandas(list(columns) if columns else None)
