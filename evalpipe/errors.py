"""Errors meant for users: each carries a one-line message that says how to fix the problem.

`exit_code` is what the CLI exits with (docs/operations.md): 2 for a user or config mistake, 1 for a failed run.
"""


class EvalError(Exception):
    """A user-facing error. Its message is one line and says what to do; no traceback is needed."""

    exit_code = 2

    def __init__(self, *args, problems: list[str] | None = None):
        super().__init__(*args)
        self.problems = list(problems or [])  # every problem found, one line each (config validation)


class ConfigError(EvalError, ValueError):
    """The config file (or a per-run override) is invalid."""


class DataError(EvalError, ValueError):
    """A dataset file is missing, unreadable or malformed."""


class WarehouseError(EvalError):
    """The warehouse can't be read or written (a damaged partition file, a full or read-only disk)."""


class RunFailed(EvalError):
    """A run (a partition, the leaderboard) failed; the message carries its root cause."""

    exit_code = 1
