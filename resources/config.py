import dataclasses
from typing import Any, Dict

from dagster import ConfigurableResource
from pydantic import Field

from evalpipe.core.config import EvalConfig
from evalpipe.project import load_config


class EvalConfigResource(ConfigurableResource):
    """The benchmarks-and-models config file. Empty `config_path`: `EVALS_CONFIG`, else `evals.yaml` in the repo."""

    config_path: str = ""
    split_options: Dict[str, Any] = Field(
        default={}, description="Adapter options merged over every benchmark split's for this run, e.g. {shuffle: true} "
                                "(what `evalpipe run --benchmark-option` sets). Not `limit`: a try is the model key "
                                "<model>@limit<N> (evalpipe run --limit N).")

    def get(self) -> EvalConfig:
        cfg = load_config(self.config_path or None)
        if not self.split_options:
            return cfg
        # A copy: the loaded config is cached and shared by everything else in the process.
        splits = {k: dataclasses.replace(s, options={**s.options, **self.split_options}) for k, s in cfg.splits.items()}
        return dataclasses.replace(cfg, splits=splits)
