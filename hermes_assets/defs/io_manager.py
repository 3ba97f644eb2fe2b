"""Loading the datasets inside Dagster: an IO manager that stores nothing (SPEC §11).

The capture writes its partition files itself, so this IO manager's
``handle_output`` keeps nothing; ``load_input`` reads the partitions a
downstream step (or ``defs.load_asset_value``) asks for, straight from the
warehouse, in the dataset's own types:

* a ``pandas.DataFrame`` by default (timestamps ``datetime64[ms, UTC]``, JSON
  columns as ``str``, nullable integer dtypes);
* a ``pyarrow.Table`` when the input is annotated ``pa.Table``;
* a :class:`~hermes_assets.lib.warehouse.loading.DatasetDays` (read one day at a time)
  when annotated so: the way to go through a long range in bounded memory.

Only some columns: ``dg.AssetIn(metadata={"columns": [...]})``. A partition
mapping (``dg.TimeWindowPartitionMapping(start_offset=-6)``: the last 7 days)
loads every mapped day; a day with no file loads as no rows.

Its resource key (``hermes_datasets``) is set on the asset outputs only; the
values ops hand each other inside the capture stay on Dagster's default IO
manager, which persists them ("re-execute from failure" needs that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import dagster as dg
import pyarrow as pa

from hermes_assets.defs.resources import HermesWarehouse
from hermes_assets.defs.settings import Settings
from hermes_assets.lib.basics import schemas
from hermes_assets.lib.warehouse.datasets import Warehouse
from hermes_assets.lib.warehouse.loading import DatasetDays

if TYPE_CHECKING:  # pandas is imported on the first load as pandas, not by every process loading the definitions
    import pandas as pd

#: the resource key of :class:`HermesDatasetsIOManager`
DATASETS_IO_MANAGER = "hermes_datasets"


class HermesDatasetsIOManager(dg.ConfigurableIOManager):
    """Loads partitions of the Hermes datasets from the warehouse as pandas or Arrow;
    stores nothing (the assets write their own partition files)."""

    warehouse: HermesWarehouse

    def handle_output(self, context: dg.OutputContext, obj: object) -> None:
        if obj is None:  # the files are written: nothing to store
            return
        raise dg.Failure(
            f"{context.asset_key.to_user_string() if context.has_asset_key else context.name} returned a "
            f"{type(obj).__name__}, but the '{DATASETS_IO_MANAGER}' IO manager stores nothing: write the "
            "partition files in the asset and return None or a MaterializeResult, or use another io_manager_key"
        )

    def load_input(self, context: dg.InputContext) -> pd.DataFrame | pa.Table | DatasetDays:
        dataset = context.asset_key.path[-1]
        schemas.schema_of(dataset)  # a clear error for an asset that is not a dataset
        columns = (context.definition_metadata or {}).get("columns")
        warehouse = self.warehouse.open()
        days = DatasetDays(warehouse, dataset, self._days(context, warehouse, dataset), columns)
        wanted = context.dagster_type.typing_type
        context.log.debug(f"loading {dataset}: {len(days)} day(s), columns={days.columns or 'all'}")
        if isinstance(wanted, type) and issubclass(wanted, DatasetDays):
            return days
        if isinstance(wanted, type) and issubclass(wanted, pa.Table):
            return days.table()
        return days.to_pandas()

    @staticmethod
    def _days(context: dg.InputContext, warehouse: Warehouse, dataset: str) -> list[str]:
        if context.has_asset_partitions:
            return list(context.asset_partition_keys)
        return warehouse.days(dataset)  # an unpartitioned upstream: whatever is on disk


def datasets_io_manager(warehouse: HermesWarehouse) -> HermesDatasetsIOManager:
    return HermesDatasetsIOManager(warehouse=warehouse)


def io_managers(s: Settings) -> dict[str, dg.ConfigurableIOManager]:
    """The IO managers of the definitions, by key, from the settings ``s``."""
    return {DATASETS_IO_MANAGER: datasets_io_manager(HermesWarehouse.from_settings(s))}
