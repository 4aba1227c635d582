from typing import Any, Dict, List, Optional

from dagster import ConfigurableResource
from pydantic import Field


class JudgeResource(ConfigurableResource):
    """Which metrics judge the rollouts and with what settings. Empty: the benchmark's own metrics."""

    metrics: Optional[List[str]] = Field(default=None, description="Metric names replacing the benchmark's defaults.")
    settings: Dict[str, Dict[str, Any]] = Field(default={}, description="Per-metric settings, e.g. {exact_match: {case_sensitive: true}}.")
