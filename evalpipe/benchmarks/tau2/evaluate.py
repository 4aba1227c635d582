"""The official tau2-bench evaluation of one conversation (docs/benchmarks.md, tau2-bench), as
sierra-research/tau2-bench `src/tau2/evaluator/` computes it (read there; written here):

- a conversation that did not end by the agent's or the user's stop scores 0 (max steps, too many errors, ...);
- a task without evaluation criteria scores 1;
- DB: the conversation's tool calls (agent's and user's, in order) replayed on a fresh database (only the tools
  that change state, the sides synced after each and once at the end), against the task's expected actions run on
  another fresh database (no sync): 1 when both hashes (agent and user database) match;
  a task with neither expected actions nor env assertions passes DB;
- ENV_ASSERTION: each assertion run on the replayed database, the sides synced after each (a domain with none of
  its functions: refused);
- ACTION: every expected action is matched by some call of the same name whose arguments, restricted to the
  action's `compare_args` (default: all the call's own arguments), equal the action's;
- COMMUNICATE: every `communicate_info` string occurs (case-insensitively, commas removed from the message) in
  some text message of the agent;
- NL_ASSERTION: needs a judge; an empty list passes;
- the reward is the product of the components in the task's `reward_basis`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

STOPS = ("agent_stop", "user_stop")


@dataclass
class Verdict:
    reward: float
    breakdown: dict[str, float] = field(default_factory=dict)
    note: str | None = None
    db_match: bool | None = None
    action_checks: list[dict[str, Any]] = field(default_factory=list)
    communicate_checks: list[dict[str, Any]] = field(default_factory=list)
    needs_judge: list[str] = field(default_factory=list)  # the NL assertions left to a judge
    db_diff: dict[str, Any] | None = None


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def tool_calls(trajectory: list[dict[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    """(requestor, name, arguments) of every tool call in the conversation, in order (agent and user)."""
    out = []
    for m in trajectory:
        if m.get("role") in ("assistant", "user") and m.get("tool_calls"):
            requestor = "user" if m["role"] == "user" else "assistant"
            for c in m["tool_calls"]:
                fn = c.get("function") or c
                out.append((requestor, fn.get("name"), _arguments(fn.get("arguments"))))
    return out


def replay(env_factory: Any, calls: list[tuple[str, str, dict[str, Any]]]) -> Any:
    """The conversation's calls on a fresh environment, as the official `set_state` replays them (only the tools
    that change state, each synced; one more sync at the end)."""
    env = env_factory()
    for requestor, name, args in calls:
        env.replay_call(requestor, name, args)
    env.sync()
    return env


def replay_expected(env_factory: Any, actions: list[dict[str, Any]]) -> Any:
    """The expected actions on a fresh environment, as the official evaluator runs them: no sync after any."""
    env = env_factory()
    for a in actions:
        env.expected_call(a.get("requestor") or "assistant", a["name"], a.get("arguments") or {})
    return env


def _matches(action: dict[str, Any], name: str, args: dict[str, Any]) -> bool:
    if action["name"] != name:
        return False
    keys = action.get("compare_args")
    keys = list(args) if keys is None else keys
    if not keys:
        return True
    return {k: v for k, v in args.items() if k in keys} == {k: v for k, v in (action.get("arguments") or {}).items()
                                                           if k in keys}


def diff(gold: Any, got: Any, path: str = "") -> dict[str, Any]:
    """Where two JSON values differ: {path: [expected, got]} (at most 50 entries), for the viewer."""
    out: dict[str, Any] = {}

    def walk(a: Any, b: Any, p: str) -> None:
        if len(out) >= 50 or a == b:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b), key=str):
                walk(a.get(k), b.get(k), f"{p}/{k}")
        else:
            out[p or "/"] = [a, b]

    walk(gold, got, path)
    return out


def evaluate(task: dict[str, Any], trajectory: list[dict[str, Any]], termination: str | None,
             env_factory: Any) -> Verdict:
    """The verdict on one conversation. `env_factory()`: a fresh environment of the task (its initial state applied)
    with `call(requestor, name, args)`, `db_hash()`, `user_db_hash()`, `state()`."""
    if termination not in STOPS:
        return Verdict(0.0, note=f"Simulation terminated prematurely. Termination reason: {termination}")
    criteria = task.get("evaluation_criteria")
    if criteria is None:
        return Verdict(1.0, note="No evaluation criteria")
    basis = set(criteria.get("reward_basis") or ["DB", "COMMUNICATE"])
    unknown = basis - {"DB", "ENV_ASSERTION", "ACTION", "COMMUNICATE", "NL_ASSERTION"}
    if unknown:
        raise ValueError(f"task {task.get('id')}: reward_basis {sorted(unknown)} is not one tau2 evaluates")
    actions = criteria.get("actions")
    calls = tool_calls(trajectory)
    v = Verdict(1.0)

    # DB and env assertions
    if actions is None and criteria.get("env_assertions") is None:
        db_reward, v.db_match = 1.0, True
        env_reward = 1.0
    else:
        predicted = replay(env_factory, calls)
        gold = replay_expected(env_factory, actions or [])
        v.db_match = predicted.db_hash() == gold.db_hash() and predicted.user_db_hash() == gold.user_db_hash()
        db_reward = 1.0 if v.db_match else 0.0
        if not v.db_match:
            v.db_diff = diff(gold.state(), predicted.state())
        env_reward = 1.0
        for assertion in criteria.get("env_assertions") or []:
            if not predicted.assertion(assertion):
                env_reward = 0.0
    if "DB" in basis:
        v.breakdown["DB"] = db_reward
    if "ENV_ASSERTION" in basis:
        v.breakdown["ENV_ASSERTION"] = env_reward

    # actions
    if "ACTION" in basis:
        ok = True
        for a in actions or []:
            hit = any(_matches(a, name, args) for _, name, args in calls)
            v.action_checks.append({"action": a["name"], "arguments": a.get("arguments"), "met": hit})
            ok = ok and hit
        v.breakdown["ACTION"] = 1.0 if ok else 0.0

    # communicate
    if "COMMUNICATE" in basis:
        texts = [m["content"].lower().replace(",", "") for m in trajectory
                 if m.get("role") == "assistant" and isinstance(m.get("content"), str) and m["content"]]
        ok = True
        for info in criteria.get("communicate_info") or []:
            hit = any(info.lower() in t for t in texts)
            v.communicate_checks.append({"info": info, "met": hit})
            ok = ok and hit
        v.breakdown["COMMUNICATE"] = 1.0 if ok else 0.0

    if "NL_ASSERTION" in basis:
        v.needs_judge = list(criteria.get("nl_assertions") or [])
        if not v.needs_judge:
            v.breakdown["NL_ASSERTION"] = 1.0

    reward = 1.0
    for value in v.breakdown.values():
        reward *= value
    v.reward = reward
    return v
