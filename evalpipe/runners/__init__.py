"""Model runners behind a registry: `register_runner`, `get_runner`, `build_runner`."""
from evalpipe.runners.base import RetryableError, Runner, build_runner, get_runner, list_runners, register_runner
from evalpipe.runners.driver import RunSettings, run_requests, run_sync
from evalpipe.runners import echo  # noqa: F401  (registers the built-in runners)

__all__ = ["RetryableError", "Runner", "RunSettings", "build_runner", "get_runner", "list_runners",
           "register_runner", "run_requests", "run_sync"]
