"""The tool layer of a tau2 split: the domain's tools over a database copy per conversation (so per sample and per
trial), and the simulated user as the conversation's partner (evalpipe/runners/tool_loop.py, `env.partner`)."""
from __future__ import annotations

import copy
import json
import textwrap
from typing import Any

from evalpipe.benchmarks.tau2.toolkit import Toolkit
from evalpipe.core.run_marks import base_id
from evalpipe.tools.base import Tool, ToolContext
from evalpipe.tools.env import ToolEnv
from evalpipe.tools.execute import ToolSession, parse_arguments

AGENT_STOP = "###STOP###"
USER_STOPS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
GREETING = "Hi! How can I help you today?"  # the agent's first message, as the official orchestrator opens
DEFAULT_MAX_STEPS = 100
DEFAULT_MAX_ERRORS = 10


class DomainEnv:
    """One task's environment: the agent's toolkit (and the user's, where the domain has one) over fresh copies of
    the databases, the task's initial state applied as the official environment applies it: `sync` (the domain's
    sync of the two sides, telecom's) runs once when the environment is built, after each initialization action,
    and once at the end; then after every successful tool call (`call`), as the official `get_response` runs it."""

    def __init__(self, toolkit: type[Toolkit], db: dict[str, Any], task: dict[str, Any],
                 user_toolkit: type[Toolkit] | None = None, user_db: dict[str, Any] | None = None,
                 sync: Any = None):
        self.tools = toolkit(db)
        self.user_tools = user_toolkit(user_db or {}) if user_toolkit is not None else None
        self._sync = sync if self.user_tools is not None else None
        self.sync()
        init = (task.get("initial_state") or {})
        data = init.get("initialization_data") or {}
        if self.user_tools is not None and (data.get("agent_data") or data.get("user_data")):
            # (the official set_state then points both toolkits at one database, which a two-sided domain's tools
            # cannot run on)
            raise ValueError(f"task {task.get('id')}: initialization_data on a domain with user tools is not "
                             f"supported (the official code would share one database between agent and user)")
        if data.get("agent_data"):
            _merge(self.tools.db, data["agent_data"])
        for action in init.get("initialization_actions") or []:
            kit = self.user_tools if action.get("env_type") == "user" else self.tools
            if kit is None or not hasattr(kit, action["func_name"]):
                raise ValueError(f"task {task.get('id')}: initialization action {action['func_name']!r} is not "
                                 f"supported by this domain's toolkit")
            getattr(kit, action["func_name"])(**(action.get("arguments") or {}))
            self.sync()
        self.sync()

    def sync(self) -> None:
        if self._sync is not None:
            self._sync(self.tools, self.user_tools)

    def _kit(self, requestor: str) -> Toolkit | None:
        return self.user_tools if requestor == "user" else self.tools

    def call(self, requestor: str, name: str, arguments: dict[str, Any]) -> str:
        """A live tool call (the conversation's): answered, then the sides synced if it succeeded."""
        kit = self._kit(requestor)
        if kit is None:
            return f"Error: Tool '{name}' not found."
        content, error = kit.call(name, arguments)
        if not error and self._sync is not None:
            try:
                self.sync()
            except Exception as exc:  # (the official get_response answers a failing sync as the call's error)
                return f"Error: {exc}"
        return content

    def replay_call(self, requestor: str, name: str, arguments: dict[str, Any]) -> None:
        """A recorded call replayed as the official evaluator replays the conversation: unknown tools and tools
        that change nothing (read, generic) skipped; the others called and synced as live."""
        kinds = [k.tool_kind(name) for k in (self.tools, self.user_tools) if k is not None and k.tool_kind(name)]
        if not kinds or kinds[0] != "write":
            return
        self.call(requestor, name, arguments)

    def expected_call(self, requestor: str, name: str, arguments: dict[str, Any]) -> None:
        """An expected action, as the official evaluator runs it on the gold environment: no sync, errors ignored."""
        kit = self._kit(requestor)
        if kit is not None:
            kit.call(name, arguments)

    def db_hash(self) -> str:
        return self.tools.db_hash()

    def user_db_hash(self) -> str | None:
        return self.user_tools.db_hash() if self.user_tools is not None else None

    def state(self) -> dict[str, Any]:
        return {"agent_db": self.tools.db, **({"user_db": self.user_tools.db} if self.user_tools else {})}

    def assertion(self, assertion: dict[str, Any]) -> bool:
        """One env assertion, run as the official `run_env_assertion` runs it (then the sides synced)."""
        kit = self.user_tools if assertion.get("env_type") == "user" else self.tools
        fn = getattr(kit, assertion["func_name"], None) if kit is not None else None
        if fn is None:
            raise ValueError(f"env assertion {assertion['func_name']!r} is not supported by this domain's toolkit")
        result = fn(**(assertion.get("arguments") or {}))
        self.sync()
        return bool(result) == bool(assertion.get("assert_value", True))


def _merge(target: dict[str, Any], update: dict[str, Any]) -> None:
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)


def scenario(task: dict[str, Any]) -> str:
    """The user's scenario text from the task's `user_scenario` (structured instructions laid out field by field)."""
    us = task.get("user_scenario") or {}
    ins = us.get("instructions")
    if isinstance(ins, str) or ins is None:
        text = ins or ""
    else:
        parts = [f"Domain: {ins.get('domain')}", f"Reason for call:\n{textwrap.indent(ins.get('reason_for_call') or '', chr(9))}"]
        for key, label in (("known_info", "Known info"), ("unknown_info", "Unknown info")):
            if ins.get(key) is not None:
                parts.append(f"{label}:\n{textwrap.indent(ins[key], chr(9))}")
        parts.append(f"Task instructions:\n{textwrap.indent(ins.get('task_instructions') or '', chr(9))}")
        text = "\n".join(parts)
    if us.get("persona"):
        text = f"Persona:\n{textwrap.indent(us['persona'], chr(9))}\n{text}"
    return text


class Tau2Partner:
    """The simulated user of every conversation of a split, and the official stop rules."""

    def __init__(self, env: "Tau2ToolEnv", user: Any, guidelines: str, max_steps: int, max_errors: int):
        self.env, self.user, self.guidelines = env, user, guidelines
        self.max_steps, self.max_errors = max_steps, max_errors

    def limit(self, session: ToolSession, trajectory: list[dict[str, Any]]) -> str | None:
        """max_steps (every message after the greeting counts one step) or too_many_errors (tool errors, agent's and
        user's), as the official orchestrator ends a conversation."""
        errors = sum(1 for m in trajectory if m.get("role") == "tool" and str(m.get("content") or "").startswith("Error:"))
        if errors >= self.max_errors:
            return "too_many_errors"
        steps = sum(1 for m in trajectory if m.get("role") != "system") - 1
        if steps >= self.max_steps:
            return "max_steps"
        return None

    async def respond(self, session: ToolSession, trajectory: list[dict[str, Any]], messages: list[dict[str, Any]],
                      request: Any, first: bool = False) -> str | None:
        last = trajectory[-1] if trajectory else {}
        if first and last.get("role") != "assistant":
            return None
        if not first and AGENT_STOP in str(last.get("content") or ""):
            return "agent_stop"
        dom: DomainEnv = session.ctx.tau2  # type: ignore[attr-defined]
        task = session.ctx.tau2_task  # type: ignore[attr-defined]
        system = f"{self.guidelines}\n\n<scenario>\n{scenario(task)}\n</scenario>"
        user_tools = self.env.user_schemas

        async def call_tool(name: str, raw: Any) -> str:
            args, why = parse_arguments(raw)
            return dom.call("user", name, args) if args is not None else f"Error: {why}"

        new = await self.user.reply(request.sample_id, system, trajectory, user_tools or None,
                                    call_tool if user_tools else None)
        trajectory.extend(new)
        text = new[-1].get("content") or ""
        messages.append({"role": "user", "content": text})
        return "user_stop" if self.user.is_stop(text) else None


class Tau2ToolEnv(ToolEnv):
    """A `ToolEnv` whose live tools are the domain's, each conversation on its own database copy."""

    def __init__(self, split: Any, domain: dict[str, Any], toolkit: type[Toolkit], tasks: dict[str, dict[str, Any]],
                 user: Any, guidelines: str, user_toolkit: type[Toolkit] | None = None,
                 user_db: dict[str, Any] | None = None, mode: str | None = None, sync: Any = None):
        options = dict(split.options)
        max_steps = int(options.get("max_steps", DEFAULT_MAX_STEPS))
        options.setdefault("max_turns", max_steps)
        options.setdefault("max_tool_calls", max_steps)
        super().__init__({}, options, resolve=split.resolve, mode="live", where=split.key)
        self.domain, self.toolkit, self.tasks = domain, toolkit, tasks
        self.user_toolkit, self.user_db, self.sync = user_toolkit, user_db, sync
        self.user_schemas = user_toolkit.schemas() if user_toolkit is not None else []
        for schema in toolkit.schemas():
            name = schema["function"]["name"]
            self.live_tools[name] = Tool(name, schema["function"]["description"], schema["function"]["parameters"],
                                         _agent_tool(name), validate=False)
        self.partner = Tau2Partner(self, user, guidelines, max_steps, int(options.get("max_errors", DEFAULT_MAX_ERRORS)))

    async def aclose(self) -> None:
        """Close the simulated user's runner (the rollout session calls this when the run ends)."""
        await self.partner.user.aclose()

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "tau2": {"toolkit": self.toolkit.__name__,
                                               "user": getattr(self.partner.user.runner, "identity", lambda: None)()}}

    def session(self, sample_id: str, offered: list[str], files: list[str] | None = None) -> ToolSession:
        s = ToolSession(self, sample_id, offered, files)
        task = self.tasks[base_id(sample_id)]
        s.ctx.tau2_task = task  # type: ignore[attr-defined]
        s.ctx.tau2 = DomainEnv(self.toolkit, self.domain["db"], task, self.user_toolkit,  # type: ignore[attr-defined]
                               self.user_db, self.sync)
        return s


def _agent_tool(name: str) -> Any:
    async def run(args: dict[str, Any], ctx: ToolContext) -> str:
        return ctx.tau2.call("assistant", name, args)  # type: ignore[attr-defined]
    return run


def task_json(task: dict[str, Any]) -> str:
    return json.dumps(task, sort_keys=True)
