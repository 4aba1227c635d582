"""The official tau2-bench evaluator's verdicts on recorded conversations (docs/benchmarks.md, tau2-bench).

Runs in a SEPARATE environment holding the official package (never the project's venv), e.g.

    git clone <sierra-research/tau2-bench> /tmp/tau2src           # data/tau2/domains/<domain> with the full db
    python3 -m venv /tmp/tau2venv && /tmp/tau2venv/bin/pip install <its dependencies>
    PYTHONPATH=/tmp/tau2src/src /tmp/tau2venv/bin/python scripts/tau2_official_verdicts.py \
        DOMAIN trajectories.json [judge_replies.jsonl] > expected.json

`judge_replies.jsonl` (data/tau2/recordings/<domain>_judge.jsonl): the judge's recorded reply to each natural-
language-assertion check, {"sample_id", "messages", "reply"}. The official judge call (`generate` in the official
NL-assertion evaluator) is replaced by a lookup of the recorded reply, after checking that the messages the official
code builds are, character for character, the recorded ones (which evalpipe's tests check against its own): so the
NL_ASSERTION component is the official code's reading of the same judge reply.

`trajectories.json`: {row_id: {"trajectory": [...messages as evalpipe records them...], "stop_reason": "..."}}
(`tests/test_tau2.py` writes it from the shipped recordings). Out: {"verdicts": {row_id: {"reward": r, "breakdown": {...}}}, "pass_hat_k": {k: ...}}.

The airline database (the official repository ships data/tau2/domains/airline/db.json empty in some checkouts) is
the first tau-bench's data (sierra-research/tau-bench `tau_bench/envs/airline/data/{flights,reservations,users}.json`)
read by the official FlightDB and dumped by it, so every field appears as the official code shows it:

    ... scripts/tau2_official_verdicts.py airline-db TAU_BENCH_DATA_DIR OUT_FULL_DB.json [SUBSET_DB.json TASK_ID...]

The tools' answers to a list of calls, on a shipped database (tests/test_tau2_airline.py compares evalpipe's):

    ... scripts/tau2_official_verdicts.py tool-calls DOMAIN DB.json CALLS.json > <domain>_tool_calls.json

For telecom CALLS.json is {"task": TASK_ID, "calls": [[requestor, name, args], ...]}: the calls of both sides from
the task's initial state, on the official databases (TAU2_DATA_DIR's); the answers and both hashes come back. The
telecom databases as JSON (the shipped db.json and user_db.json) and a tasks.json for the official loader (the
official telecom/tasks.json is empty in some checkouts: copy tasks_small.json over it in a private data dir):

    TAU2_DATA_DIR=<copy>/data ... scripts/tau2_official_verdicts.py telecom-db <copy>/data/tau2/domains/telecom data/tau2/telecom

The subset (data/tau2/airline/db.json) keeps the users of the given tasks, their reservations, and every flight on a
leg (origin, destination) that those reservations or the tasks' expected actions fly.
"""
from __future__ import annotations

import json
import sys


def airline_db(src: str, out: str, subset: str | None, task_ids: list[str]) -> None:
    from pathlib import Path

    from tau2.domains.airline.data_model import FlightDB

    raw = {k: json.loads((Path(src) / f"{k}.json").read_text()) for k in ("flights", "reservations", "users")}
    for user_id, user in raw["users"].items():  # (the first tau-bench keys users by id without a user_id field)
        user.setdefault("user_id", user_id)
    db = FlightDB.model_validate(raw)
    db.dump(out)
    if not subset:
        return
    full = json.loads(Path(out).read_text())
    tasks = {t["id"]: t for t in json.load(open(Path(out).parent / "tasks.json"))}
    users, legs = set(), set()
    for tid in task_ids:
        for a in tasks[tid]["evaluation_criteria"]["actions"]:
            if a["arguments"].get("user_id"):
                users.add(a["arguments"]["user_id"])
            if a["arguments"].get("reservation_id") in full["reservations"]:
                users.add(full["reservations"][a["arguments"]["reservation_id"]]["user_id"])
            for f in a["arguments"].get("flights") or []:
                legs.add((full["flights"][f["flight_number"]]["origin"], full["flights"][f["flight_number"]]["destination"]))
    reservations = {r: full["reservations"][r] for u in sorted(users) for r in full["users"][u]["reservations"]}
    for r in reservations.values():
        legs |= {(f["origin"], f["destination"]) for f in r["flights"]}
    flights = {k: f for k, f in full["flights"].items() if (f["origin"], f["destination"]) in legs}
    Path(subset).write_text(json.dumps({"flights": flights, "users": {u: full["users"][u] for u in sorted(users)},
                                        "reservations": reservations}, indent=1) + "\n")


def telecom_db(src: str, out: str) -> None:
    """The official telecom databases (db.toml, user_db.toml) read by the official models and written as JSON the
    way the official code prints and hashes them (enums as their values, dates and times as `str()` shows them)."""
    from pathlib import Path

    from tau2.domains.telecom.data_model import TelecomDB
    from tau2.domains.telecom.user_data_model import TelecomUserDB

    for model, name in ((TelecomDB, "db"), (TelecomUserDB, "user_db")):
        data = json.loads(json.dumps(model.load(str(Path(src) / f"{name}.toml")).model_dump(), default=str))
        (Path(out) / f"{name}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def tool_calls(domain: str, db_path: str, calls_path: str) -> None:
    """The official environment's answer to each call of a list (and the final database hash), on a shipped
    database: `{"calls": [[name, args], ...], "official": [[content, error], ...], "db_hash": ...}`."""
    from tau2.data_model.message import ToolCall
    from tau2.registry import registry

    env_cls = registry.get_env_constructor(domain)
    db_cls = type(env_cls().tools.db)
    env = env_cls(db=db_cls.load(db_path))
    calls = json.load(open(calls_path))
    if isinstance(calls, dict):  # two-sided: {"task": id, "calls": [[requestor, name, args], ...]} from its state
        task = official_tasks(domain)[calls["task"]]
        env = env_cls()  # (the official databases: TAU2_DATA_DIR's, the same as the shipped ones)
        env.set_state(task.initial_state.initialization_data, task.initial_state.initialization_actions, [])
        answers = []
        for i, (requestor, name, args) in enumerate(calls["calls"]):
            r = env.get_response(ToolCall(id=str(i), name=name, arguments=args, requestor=requestor))
            answers.append([r.content, r.error])
        json.dump({**calls, "official": answers, "db_hash": env.get_db_hash(), "user_db_hash": env.get_user_db_hash()},
                  sys.stdout, indent=1, ensure_ascii=False)
        return
    answers = []
    for i, (name, args) in enumerate(calls):
        r = env.get_response(ToolCall(id=str(i), name=name, arguments=args))
        answers.append([r.content, r.error])
    json.dump({"calls": calls, "official": answers, "db_hash": env.get_db_hash()}, sys.stdout, indent=1)


def official_tasks(domain: str) -> dict:
    """Every task of the domain's task file (the official loader's default is the `base` split)."""
    from tau2.registry import registry

    return {t.id: t for t in registry.get_tasks_loader(domain)(task_split_name=None)}


def main() -> None:
    if sys.argv[1] == "tool-calls":
        return tool_calls(sys.argv[2], sys.argv[3], sys.argv[4])
    if sys.argv[1] == "telecom-db":
        return telecom_db(sys.argv[2], sys.argv[3])
    if sys.argv[1] == "airline-db":
        return airline_db(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None, sys.argv[5:])
    from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
    from tau2.registry import registry

    domain, path = sys.argv[1], sys.argv[2]
    runs = json.load(open(path))
    recorded = {}
    if len(sys.argv) > 3:
        import tau2.evaluator.evaluator_nl_assertions as nl

        for line in open(sys.argv[3]):
            if line.strip():
                rec = json.loads(line)
                recorded[json.dumps(rec["messages"], sort_keys=True)] = rec["reply"]

        def generate(model, messages, **kwargs):  # the recorded reply, for exactly the recorded messages
            sent = json.dumps([{"role": m.role, "content": m.content} for m in messages], sort_keys=True)
            if sent not in recorded:
                raise SystemExit("the official judge messages differ from every recorded one")
            return AssistantMessage(role="assistant", content=recorded[sent])

        nl.generate = generate
    tasks = official_tasks(domain)
    out = {}
    for row_id, run in runs.items():
        messages = []
        for m in run["trajectory"]:
            role = m.get("role")
            calls = [ToolCall(id=c["id"], name=c["function"]["name"],
                              arguments=json.loads(c["function"]["arguments"] or "{}"),
                              requestor="user" if role == "user" else "assistant")
                     for c in m.get("tool_calls") or []] or None
            if role == "assistant":
                messages.append(AssistantMessage(role="assistant", content=m.get("content"), tool_calls=calls))
            elif role == "user":
                messages.append(UserMessage(role="user", content=m.get("content"), tool_calls=calls))
            elif role == "tool":
                content = m.get("content")
                messages.append(ToolMessage(id=m["tool_call_id"], role="tool", content=content,
                                            requestor=m.get("requestor") or "assistant",
                                            error=str(content).startswith("Error:")))
        task_id = row_id.split("#", 1)[0]
        sim = SimulationRun(id=row_id, task_id=task_id, start_time="", end_time="", duration=0.0,
                            termination_reason=TerminationReason(run["stop_reason"]), messages=messages)
        info = evaluate_simulation(sim, tasks[task_id], EvaluationType.ALL, solo_mode=False, domain=domain,
                                   strict_replay=False)
        out[row_id] = {"reward": info.reward,
                       "breakdown": {str(getattr(k, "value", k)): v for k, v in (info.reward_breakdown or {}).items()}}
        if domain == "telecom":  # (both databases against the expected ones: where the sync timing shows)
            out[row_id]["db_match"] = info.db_check.db_match if info.db_check else None
    # pass^k, k = 1 .. the fewest trials of a task: the official per-task pass_hat_k on is_successful, averaged
    from tau2.metrics.agent_metrics import is_successful, pass_hat_k

    by_task: dict[str, list[bool]] = {}
    for row_id, v in out.items():
        by_task.setdefault(row_id.split("#", 1)[0], []).append(is_successful(v["reward"]))
    max_k = min(len(v) for v in by_task.values())
    hat = {str(k): sum(pass_hat_k(len(v), sum(v), k) for v in by_task.values()) / len(by_task)
           for k in range(1, max_k + 1)}
    json.dump({"_source": f"sierra-research/tau2-bench a2c0247, evaluate_simulation(EvaluationType.ALL) and "
                          f"metrics.agent_metrics.pass_hat_k, run by scripts/tau2_official_verdicts.py {domain}",
               "pass_hat_k": hat, "verdicts": out}, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
