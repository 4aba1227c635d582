from typing import Any, Dict, Optional

from dagster import ConfigurableResource
from pydantic import Field

from evalpipe.config import ModelConfig
from evalpipe.runners import Runner, RunSettings, build_runner


class ModelRunnerResource(ConfigurableResource):
    """Runs prompts through the partition's model. Every field overrides the config file for one run
    (set them in the launchpad under resources.model_runner.config)."""

    concurrency: Optional[int] = Field(default=None, description="Requests in flight; default: the runner's own.")
    timeout_s: float = Field(default=120.0, description="Per-attempt timeout in seconds.")
    max_retries: int = Field(default=4, description="Retries on rate limits, 5xx and timeouts.")
    fail_fast: bool = Field(default=False, description="Stop the run at the first sample that fails for good.")
    params: Dict[str, Any] = Field(default={}, description="Decoding params merged over the model's (temperature, max_tokens, ...).")
    options: Dict[str, Any] = Field(default={}, description="Runner options merged over the model's.")

    def model_config_for(self, model: ModelConfig) -> ModelConfig:
        return model.with_overrides(params=self.params, options=self.options)

    def settings(self) -> RunSettings:
        return RunSettings(concurrency=self.concurrency, timeout_s=self.timeout_s, max_retries=self.max_retries,
                           fail_fast=self.fail_fast)

    def runner_for(self, model: ModelConfig) -> Runner:
        return build_runner(self.model_config_for(model))
