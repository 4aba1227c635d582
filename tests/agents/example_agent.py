"""Example agents for tests/test_agent_runner.py (any `module:callable` works the same way)."""
import asyncio
import os
import time
from pathlib import Path


def file_agent(task):
    """Reads its attachment, scribbles in its working dir, reports what it saw (sync, runs in a thread)."""
    task.log("start", question=task.question)
    seen = sorted(p.name for p in Path(task.workdir).iterdir())
    text = Path(task.files[0]).read_text() if task.files else ""
    Path(task.files[0] if task.files else Path(task.workdir) / "x").write_text("modified by the agent")
    (Path(task.workdir) / "scratch.txt").write_text(task.id)
    task.log("tool", name="read_file", result=text)
    return {"prediction": text.strip().upper() or "none", "messages": [
        {"role": "user", "content": task.question}, {"role": "assistant", "content": "reading"},
        {"role": "tool", "content": text}, {"role": "assistant", "content": text.strip().upper()}],
        "tool_calls": [{"name": "read_file", "args": {"path": task.files[0] if task.files else None}}],
        "usage": {"input_tokens": 10, "output_tokens": 2, "cost": 0.001}, "events": [{"type": "seen", "files": seen}]}


async def async_agent(task):
    await asyncio.sleep(0.01)
    return task.question[::-1]


def slow_agent(task):
    if "slow" in task.question:
        time.sleep(5)
    return "done"


def cwd_agent(task):
    """Relies on the process cwd being its working directory (needs isolation: process)."""
    if "slow" in task.question:
        time.sleep(30)
    Path("out.txt").write_text(task.id)
    return {"prediction": os.getcwd() == task.workdir and sorted(os.listdir(".")) or "wrong cwd"}


def broken_agent(task):
    raise ValueError(f"cannot handle {task.id}")
