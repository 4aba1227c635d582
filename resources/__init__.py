"""Configurable Dagster resources: the config file, the model runner, the judges, the warehouse."""
from resources.config import EvalConfigResource
from resources.judge import JudgeResource
from resources.runner import ModelRunnerResource
from resources.tools import ToolsResource
from resources.warehouse import WarehouseIOManager, WarehouseResource


def default_resources() -> dict:
    warehouse = WarehouseResource()
    return {
        "eval_config": EvalConfigResource(),
        "model_runner": ModelRunnerResource(),
        "judge": JudgeResource(),
        "tools": ToolsResource(),
        "warehouse": warehouse,
        "warehouse_io_manager": WarehouseIOManager(warehouse=warehouse),
    }


__all__ = ["EvalConfigResource", "JudgeResource", "ModelRunnerResource", "ToolsResource", "WarehouseIOManager", "WarehouseResource",
           "default_resources"]
