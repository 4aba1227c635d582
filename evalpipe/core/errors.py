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


# ---- one-line causes ------------------------------------------------------------------------------------------------
# Dagster wraps a step's exception in errors whose own message says only where it happened
# ("Error occurred while handling output ..."): the cause below them is what the user needs.
_WRAPPERS = ("DagsterExecutionStepExecutionError", "DagsterExecutionHandleOutputError", "DagsterExecutionLoadInputError",
             "DagsterUserCodeExecutionError", "DagsterExecutionInterruptedError", "RetryRequestedFromPolicy")


def _first_line(text: str) -> str:
    """The first informative line (DuckDB and Python 3.11 add `^^^^` marker lines under the code)."""
    for line in str(text or "").splitlines():
        s = line.strip()
        if s and set(s) - set("^~ "):
            return s
    return ""


def _with_file(msg: str, filename: str | None) -> str:
    if filename and str(filename) not in msg:
        return f"{msg} (file: {filename})"
    return msg


def describe_exception(exc: BaseException) -> str:
    """One line naming the root cause: the outermost message, then each different cause in the chain."""
    parts: list[str] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        text = _first_line(str(cur))
        line = text if isinstance(cur, EvalError) and text else (f"{type(cur).__name__}: {text}" if text
                                                                 else type(cur).__name__)
        line = _with_file(line, getattr(cur, "filename", None))
        if not any(text and text in p for p in parts):
            parts.append(line)
        cur = cur.__cause__
    return parts[0] + "".join(f" (caused by {p})" for p in parts[1:])


def describe_error_info(err) -> str:
    """The same for a Dagster `SerializableErrorInfo` (a step failure stored in the event log): wrappers are
    skipped, the remaining chain is named from the outermost real error to its root."""
    parts: list[str] = []
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if err.cls_name not in _WRAPPERS:
            text = _first_line(err.message)
            # `message` is "module.ClassName: text"; the project's own errors speak for themselves
            if text.startswith("evalpipe.core.errors."):
                text = text.split(": ", 1)[-1]
            line = text or (err.cls_name or "error")
            if not any(text and text in p for p in parts):
                parts.append(line)
        # `context` ("during handling of ...") is followed only below Dagster's wrappers: elsewhere it is noise
        # like the FileNotFoundError that mkdir(parents=True) handles before failing for another reason
        err = err.cause or (err.context if err.cls_name in _WRAPPERS else None)
    if not parts:
        return "failed"
    return parts[0] + "".join(f" (caused by {p})" for p in parts[1:])
