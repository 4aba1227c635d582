import dataclasses
from typing import Any, Dict

from dagster import ConfigurableResource, ResourceDependency
from pydantic import Field

from evalpipe.core.config import EvalConfig
from evalpipe.project import Project


class EvalConfigResource(ConfigurableResource):
    """The project's benchmarks-and-models config (bound by eval_assets/factory.py), with run-time split options."""

    project: ResourceDependency[Project]
    split_options: Dict[str, Any] = Field(
        default={}, description="Adapter options merged over every benchmark split's for this run, e.g. {shuffle: true} "
                                "(what `evalpipe run --benchmark-option` sets). Not `limit`: a try is the model key "
                                "<model>@limit<N> (evalpipe run --limit N).")

    def get(self) -> EvalConfig:
        if self.project is None:  # made with split options only: eval_assets/launch.py binds the project
            raise RuntimeError("EvalConfigResource has no project; build resources with resources.project_resources")
        cfg = self.project.config
        if not self.split_options:
            return cfg
        # A copy: the project's config is shared by everything else in the process.
        splits = {k: dataclasses.replace(s, options={**s.options, **self.split_options}) for k, s in cfg.splits.items()}
        return dataclasses.replace(cfg, splits=splits)
