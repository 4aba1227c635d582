"""`runner: agent`: the user's own agent, `model: "package.module:callable"` (sync or async).

The callable gets one `AgentTask` per sample (id, question, messages, files, metadata, workdir) and returns the
prediction: a string, or a dict / object with `prediction` and optionally `messages`, `tool_calls`, `usage`
(`input_tokens`, `output_tokens`, `cost`) and `events`. It may also call `task.log(type, **data)` as it works.
Messages, tool calls and events all land in the rollout's `trajectory` column.

Each sample runs isolated: its own fresh temporary working directory holding copies of its attachments
(`task.files` point at the copies, so an agent may modify them freely), removed afterwards unless
`options.keep_workdir`, and its own timeout: the run's `timeout_s` (set it on the model entry or per run), not
retried. With `options.isolation: thread` (the default) each sync agent call runs in a daemon thread of its own
and async agents run on an event loop of their own in a daemon thread (`AgentLoop`), never on the run's loop: an
agent that blocks (`time.sleep` in an async agent, a hang) stops only itself, so `timeout_s` always ends its
sample. Agents must use `task.workdir` rather than the process-wide cwd. A thread that overruns its timeout is
abandoned, not killed (Python cannot kill a thread), and never keeps the process from exiting (daemon threads,
never joined: evalpipe/tools/threads.py). With `options.isolation: process` each sample runs in its own Python
process whose cwd is the working directory; it is killed at the timeout. A failing or timed-out agent is recorded
as that sample's error (not retried, unless it raises `RetryableError`).

Tools (docs/tools.md): when the sample offers tools, `task.tools` holds their schemas (the dataset's names) and
`task.call_tool(name, arguments)` (sync agents, or async ones: it blocks the agents' loop while the tool runs) or
`await task.acall_tool(...)` (async agents, without blocking) runs a call through the same tool layer as every
other runner (fixtures, allowlist, live and sandbox tools), on the run's loop, so the `tool_calls` table gets the
same records; it returns the tool's result (parsed JSON). Thread isolation only.

Fingerprints hash the callable's name, `params` and `options.version`: bump `version` when the agent's code
changes and its old answers should be re-run.

Usage deltas: an agent reused across samples often keeps cumulative usage (an SDK client's running totals). When
the callable (or the object a bound method belongs to) has `usage_summary()` or a `usage` attribute (a mapping or an
object with `input_tokens`/`prompt_tokens`, `output_tokens`/`completion_tokens`, `cost`), it is read before and after
each sample and the difference is that sample's usage (unless the agent returned its own `usage`), kept as a
`usage_delta` event too. Such an agent runs one sample at a time by default (`concurrency` 1): with samples
overlapping, a window holding another sample's calls is not attributed (event `usage_delta_skipped`).
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Optional

from pydantic import BaseModel

from evalpipe.core.config import ModelConfig
from evalpipe.core.errors import ConfigError
from evalpipe.runners.base import ModelError, RetryableError, Runner, register_runner
from evalpipe.core.types import Generation, RolloutRequest
from evalpipe.tools.threads import in_daemon_thread


@dataclass
class AgentTask:
    id: str
    question: str  # the last user message
    messages: list[dict[str, Any]]  # the whole prompt (system + user turns)
    files: list[str]  # absolute paths of this sample's attachments, copied into `workdir`
    metadata: dict[str, Any]
    workdir: str  # this sample's own scratch directory
    params: dict[str, Any] = field(default_factory=dict)  # the model's `params` from the config
    events: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None  # tool schemas the sample offers (dataset names); None: no tools
    _tools: Any = field(default=None, repr=False)  # the tool layer's handle (evalpipe/tools), when tools are offered

    def call_tool(self, name: str, arguments: Any = None) -> Any:
        """Run one tool call through the tool layer (from a sync agent's thread); returns the tool's result."""
        if self._tools is None:
            raise RuntimeError("this sample offers no tools (or the agent runs with isolation: process)")
        return self._tools.call_sync(name, arguments)

    async def acall_tool(self, name: str, arguments: Any = None) -> Any:
        """`call_tool` for async agents."""
        if self._tools is None:
            raise RuntimeError("this sample offers no tools (or the agent runs with isolation: process)")
        return await self._tools.acall(name, arguments)

    def log(self, type: str, **data: Any) -> None:
        """Record an event (a step, a tool call, an observation); it is stored with the rollout."""
        self.events.append({"type": type, **data})


def load_callable(spec: str | None) -> Callable[..., Any]:
    if not spec or ":" not in spec:
        raise ConfigError(f"agent model {spec!r} must be 'package.module:callable'")
    from evalpipe.core.registry import import_callable

    return import_callable(spec, f"agent {spec!r}")


_USAGE_FIELDS = {"input_tokens": ("input_tokens", "prompt_tokens"),
                 "output_tokens": ("output_tokens", "completion_tokens"), "cost": ("cost", "cost_usd", "total_cost")}


def usage_owner(fn: Any) -> Any:
    """The object whose cumulative usage is read around each sample: the callable or its bound method's owner
    (None when neither has `usage_summary()` / `usage`)."""
    for obj in (fn, getattr(fn, "__self__", None)):
        if obj is not None and not inspect.isfunction(obj) and (hasattr(obj, "usage_summary") or hasattr(obj, "usage")):
            return obj
    return None


def usage_snapshot(owner: Any) -> dict[str, float]:
    """The owner's cumulative usage now, as {input_tokens, output_tokens, cost} (fields it lacks left out)."""
    raw = owner.usage_summary() if hasattr(owner, "usage_summary") else owner.usage
    raw = raw() if callable(raw) else raw
    out = {}
    for name, keys in _USAGE_FIELDS.items():
        for k in keys:
            v = raw.get(k) if isinstance(raw, dict) else getattr(raw, k, None)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[name] = v
                break
    return out


def usage_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0) for k in after}


def normalize(result: Any, task: AgentTask) -> Generation:
    """An agent's return value -> a Generation (the fields every runner produces)."""
    if isinstance(result, str) or result is None:
        result = {"prediction": result}
    elif not isinstance(result, dict):
        result = {k: getattr(result, k) for k in ("prediction", "messages", "tool_calls", "usage", "events")
                  if hasattr(result, k)}
    if "prediction" not in result:
        raise ModelError(f"agent returned {sorted(result)} without 'prediction'")
    usage = result.get("usage") or {}
    trajectory = [{"type": "message", **m} for m in result.get("messages") or []]
    trajectory += [{"type": "tool_call", **(t if isinstance(t, dict) else {"call": t})}
                   for t in result.get("tool_calls") or []]
    trajectory += [e if isinstance(e, dict) else {"type": "event", "data": e}
                   for e in [*task.events, *(result.get("events") or [])]]
    pred = result["prediction"]
    return Generation(
        text=None if pred is None else str(pred), finish_reason=result.get("finish_reason", "stop"),
        input_tokens=usage.get("input_tokens", usage.get("prompt_tokens")),
        output_tokens=usage.get("output_tokens", usage.get("completion_tokens")),
        cost=float(usage.get("cost") or 0.0), trajectory=trajectory)


class AgentOptions(BaseModel):
    """The `agent` runner's options (`model:` names the callable)."""

    isolation: Optional[Literal["thread", "process"]] = None
    keep_workdir: Optional[bool] = None
    version: Any = None  # the agent's own version: part of the rollout fingerprint


@register_runner("agent")
class AgentRunner(Runner):
    name = "agent"
    default_concurrency = 4
    retry_timeouts = False
    option_schema = AgentOptions

    def __init__(self, model: ModelConfig):
        super().__init__(model)
        self.spec = str(model.model or "")
        self.fn = load_callable(self.spec)  # fail at build time, with the fix in the message
        self.isolation = model.options.get("isolation", "thread")
        if self.isolation not in ("thread", "process"):
            raise ConfigError(f"model {model.key!r}: options.isolation must be 'thread' or 'process'")
        self.keep_workdir = bool(model.options.get("keep_workdir", False))
        self._agent_loop: AgentLoop | None = None  # where async agents run (created on first use)
        self._usage_owner = usage_owner(self.fn)
        self._in_flight = 0  # samples of this agent running now (a usage window must hold one only)
        if self._usage_owner is not None:
            self.default_concurrency = 1  # cumulative usage: one sample at a time, so each delta is its own

    def identity(self) -> dict[str, Any]:
        return {"runner": self.name, "agent": self.spec, "params": self.model.params,
                "version": self.model.options.get("version")}

    def _task(self, request: RolloutRequest, workdir: Path) -> AgentTask:
        files = []
        for f in request.files:
            src = Path(f)
            if not src.is_file():
                raise ModelError(f"attachment {f} not found")
            dst = workdir / src.name
            shutil.copy2(src, dst)
            files.append(str(dst))
        users = [m for m in request.messages if m.get("role") == "user"]
        return AgentTask(id=request.sample_id, question=str(users[-1]["content"]) if users else "",
                         messages=request.messages, files=files, metadata=request.metadata, workdir=str(workdir),
                         params=dict(self.model.params))

    async def generate(self, request: RolloutRequest, tools: Any = None) -> Generation:
        workdir = Path(tempfile.mkdtemp(prefix=f"agent-{_safe(request.sample_id)}-"))
        try:
            task = self._task(request, workdir)
            if tools is not None:
                task.tools, task._tools = request.tools, tools
            # The run's per-attempt `timeout_s` bounds each sample (the driver cancels this coroutine; a
            # process is killed then, the workdir removed either way).
            if self.isolation == "process":
                return await self._in_process(task)
            return await self._in_thread(task)
        finally:
            if not self.keep_workdir:
                shutil.rmtree(workdir, ignore_errors=True)

    async def _in_thread(self, task: AgentTask) -> Generation:
        owner = getattr(self, "_usage_owner", None)
        if owner is None:
            return await self._call_in_thread(task)
        self._in_flight += 1
        self._started = mine = getattr(self, "_started", 0) + 1
        alone = self._in_flight == 1
        before = usage_snapshot(owner)
        try:
            gen = await self._call_in_thread(task)
        finally:
            self._in_flight -= 1
        after = usage_snapshot(owner)
        # the window is this sample's alone when nothing else ran in it: none running at its start or end, none started
        alone = alone and self._in_flight == 0 and self._started == mine
        if not alone:
            gen.trajectory.append({"type": "usage_delta_skipped", "reason": "samples of this agent overlapped"})
            return gen
        delta = usage_delta(before, after)
        gen.trajectory.append({"type": "usage_delta", "before": before, "after": after, "delta": delta})
        if gen.input_tokens is None and gen.output_tokens is None and not gen.cost:  # the agent's own usage wins
            gen.input_tokens, gen.output_tokens = delta.get("input_tokens"), delta.get("output_tokens")
            gen.cost = float(delta.get("cost") or 0.0)
        return gen

    async def _call_in_thread(self, task: AgentTask) -> Generation:
        try:
            if inspect.iscoroutinefunction(self.fn) or inspect.iscoroutinefunction(getattr(self.fn, "__call__", None)):
                result = await self._on_agent_loop(self.fn(task))
            else:
                result = await in_daemon_thread(functools.partial(self.fn, task))
                if inspect.iscoroutine(result):  # a sync wrapper around a coroutine (function.py's adapt)
                    result = await self._on_agent_loop(result)
                elif inspect.isawaitable(result):
                    result = await result
        except ModelError:
            raise
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if me is None or me.cancelling():  # the sample's timeout, or the run stopping
                raise
            # cancelled on the agents' side only (the agent raised it): this sample's error, not the run's
            raise ModelError("agent raised CancelledError") from None
        except Exception as exc:
            raise ModelError(f"agent raised {type(exc).__name__}: {exc}") from None
        return normalize(result, task)

    async def _on_agent_loop(self, coro: Any) -> Any:
        agent_loop = getattr(self, "_agent_loop", None)
        if agent_loop is None or agent_loop.stuck():
            if agent_loop is not None:
                agent_loop.retire()  # blocked by an agent (one past its timeout, say): later samples get a fresh one
            agent_loop = self._agent_loop = AgentLoop()
        return await agent_loop.run(coro)

    async def _in_process(self, task: AgentTask) -> Generation:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(Path(__file__).with_name("agent_child.py")), self.spec, cwd=task.workdir, env=env,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await proc.communicate(json.dumps(asdict(task)).encode())
        except BaseException:  # timeout or cancellation: the agent dies with its sample
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            raise
        try:
            reply = json.loads(out.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
            raise ModelError(f"agent process failed: {tail[0]}") from None
        if "error" in reply:
            cls = RetryableError if reply.get("retryable") else ModelError
            raise cls(reply["error"])
        task.events = reply.get("task_events") or []
        return normalize(reply["result"], task)

    async def generate_with_tools(self, request: RolloutRequest, session: Any) -> Generation:
        """[tools] The loop hands agents the sample's tool session instead of driving a chat step."""
        if self.isolation == "process":
            raise ModelError("agent tools need options.isolation: thread (a separate process cannot reach the "
                             "tool layer)")
        return await self.generate(request, ToolHandle(session, asyncio.get_running_loop()))

    async def aclose(self) -> None:
        agent_loop, self._agent_loop = getattr(self, "_agent_loop", None), None
        if agent_loop is not None:
            agent_loop.retire()


class AgentLoop:
    """An event loop in a daemon thread, where async agents run. An agent that blocks its loop (a sync call such as
    `time.sleep` or `task.call_tool`) then blocks this one, never the run's: the run's loop keeps its timers, so the
    sample's `timeout_s` still ends it, and the tools an agent calls (which run on the run's loop) still answer.

    One loop serves a runner's samples (a client an agent keeps between samples stays on one loop) while it is
    responsive: it beats every `BEAT_S`, and one that missed its beats for `STUCK_AFTER_S` is blocked by an agent,
    so the runner retires it and later samples get a fresh one. A retired loop stops once its agents end; a blocked
    one is abandoned with its thread (a daemon: it never keeps the process alive)."""

    BEAT_S = 0.1
    STUCK_AFTER_S = 1.0

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.last_beat = time.monotonic()
        self._running = 0  # agents running on this loop (read and written on its thread only)
        self._retired = False
        threading.Thread(target=self._serve, name="evalpipe-agent-loop", daemon=True).start()

    def _beat(self) -> None:
        self.last_beat = time.monotonic()
        self.loop.call_later(self.BEAT_S, self._beat)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._beat)
        try:
            self.loop.run_forever()
        finally:
            pending = asyncio.all_tasks(self.loop)
            for t in pending:
                t.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    async def run(self, coro: Any) -> Any:
        """Await `coro` on this loop; cancelling the await (the sample's timeout) cancels the agent there."""
        async def tracked() -> Any:
            self._running += 1
            try:
                return await coro
            finally:
                self._running -= 1
                if self._retired and not self._running:
                    self.loop.stop()

        try:
            future = asyncio.run_coroutine_threadsafe(tracked(), self.loop)
        except RuntimeError:  # closed already: the coroutine never ran
            coro.close()
            raise
        return await asyncio.wrap_future(future)

    def stuck(self) -> bool:
        """Whether an agent has blocked this loop for over `STUCK_AFTER_S`."""
        return time.monotonic() - self.last_beat > self.STUCK_AFTER_S

    def retire(self) -> None:
        """Stop the loop once its running agents end (at once when none runs; never while one blocks it)."""
        def stop_when_idle() -> None:
            self._retired = True
            if not self._running:
                self.loop.stop()

        try:
            self.loop.call_soon_threadsafe(stop_when_idle)
        except RuntimeError:  # already closed
            pass


class ToolHandle:
    """What `AgentTask.call_tool` / `acall_tool` talk to: one sample's `ToolSession`, which runs on the run's loop
    (`loop`), callable from an agent's thread or from the agents' own loop."""

    def __init__(self, session: Any, loop: asyncio.AbstractEventLoop):
        self.session, self.loop = session, loop

    async def call(self, name: str, arguments: Any = None) -> Any:
        """One call, on the run's loop."""
        env = self.session.env
        if len(self.session.records) >= env.max_tool_calls:
            return {"ok": False, "error": "max_tool_calls"}
        _, content = await self.session.call(name, {} if arguments is None else arguments,
                                             turn=len(self.session.records))
        try:
            return json.loads(content)
        except ValueError:
            return content

    async def acall(self, name: str, arguments: Any = None) -> Any:
        """`call` from any loop: handed to the run's loop when awaited on another one (an async agent's)."""
        if _running_loop() is self.loop:
            return await self.call(name, arguments)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.call(name, arguments), self.loop))

    def call_sync(self, name: str, arguments: Any = None) -> Any:
        if _running_loop() is self.loop:
            # waiting here for the run's loop would block that very loop for good (and every timeout with it)
            raise RuntimeError("task.call_tool(...) was called on the run's event loop, where it would wait for "
                               "itself; in an async agent use `await task.acall_tool(...)`")
        return asyncio.run_coroutine_threadsafe(self.call(name, arguments), self.loop).result()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _safe(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in s)[:40]
