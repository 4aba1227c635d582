"""Errors meant for users: each carries a one-line message that says how to fix the problem."""


class EvalError(Exception):
    """A user-facing error. Its message is one line and says what to do; no traceback is needed."""


class ConfigError(EvalError, ValueError):
    """The config file (or a per-run override) is invalid."""


class DataError(EvalError, ValueError):
    """A dataset file is missing, unreadable or malformed."""


class WarehouseError(EvalError):
    """The warehouse can't be read or written."""
