"""Partition keys that say what kind of run made them.

- `--limit N` runs evaluate `<model>@limit<N>` (or `<model>@<experiment>-limit<N>`): their own partitions, so a
  quick look never overwrites (or passes for) the full results; the leaderboard leaves them out unless asked.
  The config resolves such a key to its base model (`EvalConfig.model`: `name@experiment`).
- `--model <litellm model string>` that is not a configured key becomes a temporary model entry
  `adhoc:<model string>` (runner litellm), recorded in the models registry beside the instance
  (`$DAGSTER_HOME/models/`) so every process of the run resolves it.
"""
from __future__ import annotations

import re

from evalpipe.keys import sanitize_key

_LIMITED = re.compile(r"@(?:.*-)?limit\d+$")
ADHOC_PREFIX = "adhoc:"


def limited_key(model_key: str, limit: int) -> str:
    base, sep, experiment = model_key.partition("@")
    return f"{base}@{experiment}-limit{int(limit)}" if sep and experiment else f"{base}@limit{int(limit)}"


def is_limited(model_key: str) -> bool:
    return bool(_LIMITED.search(str(model_key)))


def is_adhoc(model_key: str) -> bool:
    return str(model_key).startswith(ADHOC_PREFIX)


def looks_like_model_string(name: str) -> bool:
    """`provider/model` (litellm's form) rather than a config key."""
    return "/" in name


def adhoc_model(model: str, api_base: str | None = None, api_key_env: str | None = None,
                params: dict | None = None):
    """A temporary litellm model entry for `evalpipe run --model <string>`, registered for this instance."""
    from evalpipe.config import ModelConfig
    from evalpipe.models_registry import register_model

    key = ADHOC_PREFIX + sanitize_key(model)
    entry = ModelConfig(key=key, runner="litellm", model=model, api_base=api_base, api_key_env=api_key_env,
                        params=dict(params or {}),
                        description=f"ad-hoc model from `evalpipe run --model {model}` (not in the config file)")
    register_model(entry)
    return entry
