"""Configurable Dagster resources: the config file, the model runner, the judges, the warehouse."""
from evalpipe.project import Project
from evalpipe.project.redaction import install_redaction
from resources.config import EvalConfigResource
from resources.judge import JudgeResource
from resources.runner import ModelRunnerResource
from resources.tools import ToolsResource
from resources.warehouse import WarehouseIOManager, WarehouseResource


def project_resources(project: Project) -> dict:
    """The resources of the asset graph, bound to one project (its config, its warehouse). Every write they
    make masks the project's secrets."""
    install_redaction(project)
    warehouse = WarehouseResource(path=str(project.warehouse))
    return {
        "eval_config": EvalConfigResource(project=project),
        "model_runner": ModelRunnerResource(),
        "judge": JudgeResource(),
        "tools": ToolsResource(),
        "warehouse": warehouse,
        "warehouse_io_manager": WarehouseIOManager(warehouse=warehouse),
    }


__all__ = ["EvalConfigResource", "JudgeResource", "ModelRunnerResource", "ToolsResource", "WarehouseIOManager", "WarehouseResource",
           "project_resources"]
