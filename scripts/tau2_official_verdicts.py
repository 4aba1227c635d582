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
(`tests/test_tau2.py` writes it from the shipped recordings). Out: {row_id: {"reward": r, "breakdown": {...}}}.
"""
from __future__ import annotations

import json
import sys


def main() -> None:
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
    tasks = {t.id: t for t in registry.get_tasks_loader(domain)()}
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
    json.dump(out, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
