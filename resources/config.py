from dagster import ConfigurableResource

from evalpipe.config import EvalConfig, load_config


class EvalConfigResource(ConfigurableResource):
    """The benchmarks-and-models config file. Empty `config_path`: `EVALS_CONFIG`, else `evals.yaml` in the repo."""

    config_path: str = ""

    def get(self) -> EvalConfig:
        return load_config(self.config_path or None)
