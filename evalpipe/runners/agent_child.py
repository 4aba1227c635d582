"""The per-sample process of the agent runner's `isolation: process` mode, run as a script:
`python agent_child.py <module:callable>`, task JSON on stdin, one JSON line on stdout.

Standard library only, and run by path rather than `-m evalpipe...`: importing the `evalpipe` package would pull
in pandas, pyarrow and duckdb, seconds of startup per sample. The agent may still import whatever it needs.
"""
from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import sys
from typing import Any


class AgentTask:
    """Same fields and `log()` as `evalpipe.runners.agent.AgentTask`."""

    def __init__(self, **fields: Any):
        self.__dict__.update(fields)
        self.events = list(fields.get("events") or [])

    @property
    def task_id(self) -> str:  # the GAIA lab's names, as evalpipe.runners.agent.AgentTask has them
        return self.id

    @property
    def level(self) -> Any:
        meta = self.__dict__.get("metadata") or {}
        return next((meta[k] for k in ("Level", "level") if k in meta), None)

    @property
    def file_name(self) -> Any:
        return (self.__dict__.get("metadata") or {}).get("file_name") or None

    def log(self, type: str, **data: Any) -> None:
        self.events.append({"type": type, **data})


def main(spec: str) -> None:
    task = AgentTask(**json.loads(sys.stdin.read()))
    try:
        module_name, _, attr = spec.partition(":")
        fn: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            fn = getattr(fn, part)
        result = fn(task)
        if inspect.isawaitable(result):
            result = asyncio.run(result)
        if not isinstance(result, (str, dict)) and result is not None:
            result = {k: getattr(result, k) for k in ("prediction", "messages", "tool_calls", "usage", "events")
                      if hasattr(result, k)}
        reply = {"result": result, "task_events": task.events}
    except Exception as exc:
        reply = {"error": f"agent raised {type(exc).__name__}: {exc}",
                 "retryable": type(exc).__name__ == "RetryableError"}
    sys.stdout.write("\n" + json.dumps(reply, default=str) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
