"""Model runners behind a registry: `register_runner`, `get_runner`, `build_runner`.

Built in: `echo` (smoke tests), `litellm` (any API model; OpenAI-compatible endpoints on a fast path),
`local` (an embedded Hugging Face / GGUF model), `agent` (the user's own agent callable), `function` (a function
given to the Python API in this process), `replay` (predictions from a JSONL file).
To run many requests (rollouts, judges): `build_runner(ModelConfig(...))` then `run_requests(...)` / `run_sync`.
"""
from evalpipe.runners.base import (ModelError, RetryableError, Runner, build_runner, get_runner, list_runners,
                                   register_runner)
from evalpipe.runners.driver import RunSettings, run_requests, run_settings_for, run_sync
from evalpipe.runners import agent, echo, litellm_runner, local  # noqa: F401  (registers the built-in runners)
from evalpipe.runners import replay  # noqa: F401  (runner: replay, docs/tools.md)
from evalpipe.runners import function  # noqa: F401  (runner: function, a Python function: docs/api.md)

__all__ = ["ModelError", "RetryableError", "Runner", "RunSettings", "build_runner", "get_runner", "list_runners",
           "register_runner", "run_requests", "run_settings_for", "run_sync"]
