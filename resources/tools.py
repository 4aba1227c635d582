from typing import Optional

from dagster import ConfigurableResource
from pydantic import Field


class ToolsResource(ConfigurableResource):
    """How tool calls are answered in this run (docs/tools.md). Set in the launchpad under
    resources.tools.config, e.g. `mode: live` to run live tools instead of replaying fixtures."""

    mode: Optional[str] = Field(default=None, description="replay (fixtures answer; no network) or live (live "
                                "tools run); default: each benchmark's `tools.mode`, else replay.")

    def mode_override(self) -> Optional[str]:
        if self.mode is not None and self.mode not in ("replay", "live"):
            from evalpipe.core.errors import ConfigError

            raise ConfigError(f"resources.tools.config.mode must be replay or live, not {self.mode!r}")
        return self.mode
