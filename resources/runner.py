from typing import Any, Dict, Optional

from dagster import ConfigurableResource
from pydantic import Field

from evalpipe.core.config import ModelConfig
from evalpipe.runners import Runner, RunSettings, build_runner, run_settings_for


class ModelRunnerResource(ConfigurableResource):
    """Runs prompts through the partition's model. Every field overrides the config file for one run
    (set them in the launchpad under resources.model_runner.config)."""

    concurrency: Optional[int] = Field(default=None, description="Requests in flight; default: the model's "
                                       "`options.concurrency`, else the runner's own.")
    timeout_s: Optional[float] = Field(default=None, description="Per-attempt timeout in seconds (default 120).")
    max_retries: Optional[int] = Field(default=None, description="Retries on rate limits, 5xx and timeouts (default 4).")
    fail_fast: Optional[bool] = Field(default=None, description="Stop the run at the first sample that fails for good.")
    rpm: Optional[float] = Field(default=None, description="Requests-per-minute limit for the run (default: none).")
    tpm: Optional[float] = Field(default=None, description="Tokens-per-minute limit for the run (default: none).")
    params: Dict[str, Any] = Field(default={}, description="Decoding params merged over the model's (temperature, max_tokens, ...).")
    options: Dict[str, Any] = Field(default={}, description="Runner options merged over the model's.")

    def model_config_for(self, model: ModelConfig) -> ModelConfig:
        return model.with_overrides(params=self.params, options=self.options)

    def settings(self, model: Optional[ModelConfig] = None, rate_limits: Optional[Dict[str, Any]] = None) -> RunSettings:
        """Run settings: a field set here wins, then the model's `options` (same names), then the defaults.
        `rate_limits`: the project's `rate_limits:` section."""
        return run_settings_for(self.model_config_for(model) if model is not None else None, rate_limits, **{
            k: getattr(self, k) for k in ("concurrency", "timeout_s", "max_retries", "fail_fast", "rpm", "tpm")})

    def runner_for(self, model: ModelConfig) -> Runner:
        return build_runner(self.model_config_for(model))
