from typing import Any, Dict, List, Optional

from dagster import ConfigurableResource
from pydantic import Field


class JudgeResource(ConfigurableResource):
    """Which metrics judge the rollouts, with what settings and judge models. Every field overrides the config
    file for one run (launchpad: resources.judge.config). Empty: the benchmark's own metrics and settings."""

    metrics: Optional[List[str]] = Field(default=None, description="Metric names replacing the benchmark's defaults.")
    settings: Dict[str, Dict[str, Any]] = Field(default={}, description="Per-metric settings, e.g. {exact_match: {case_sensitive: true}}.")
    judges: Optional[List[str]] = Field(default=None, description="Judge models (names under `judges:` in the config) for every model-graded metric, replacing their own.")
    concurrency: Optional[int] = Field(default=None, description="Judge calls in flight per judge model.")
    timeout_s: Optional[float] = Field(default=None, description="Per-attempt timeout of a judge call, in seconds.")
    max_retries: Optional[int] = Field(default=None, description="Retries of a judge call on rate limits, 5xx and timeouts.")

    def metric_settings(self) -> Dict[str, Dict[str, Any]]:
        """Per-metric settings, plus the run-wide judge overrides under "*" (model-graded metrics take them)."""
        shared = {k: getattr(self, k) for k in ("judges", "concurrency", "timeout_s", "max_retries")
                  if getattr(self, k) is not None}
        return {**self.settings, "*": shared} if shared else dict(self.settings)
