"""tau2-bench's natural-language assertions: a judge model reads the conversation and grades each of the task's
`nl_assertions` (docs/benchmarks.md, tau2-bench). The semantics are those of the official
`src/tau2/evaluator/evaluator_nl_assertions.py` (read there; written here):

- the conversation is shown as one line per message, `<role>: <content>` (every message of the run: agent, user
  and tool turns; a tool-call turn's missing text shows as `None`), the system prompt left out;
- the assertions are shown as a Python list; the judge answers one JSON object `{"results": [{"expectedOutcome",
  "reasoning", "metExpectation"}, ...]}` and the component is 1 when every result is met (an answer with no
  results counts as met, as the official `all([])` does);
- a reply that is not that JSON object is not read as a verdict (the official evaluation raises there): the
  conversation is left unscored with the reason.

`tests/test_tau2.py` checks that the messages built here are the official ones, character for character.
"""
from __future__ import annotations

import json
from typing import Any

SYSTEM = """
        TASK
        - You will be given a list of expected outcomes and a conversation that was collected during a test case run.
        - The conversation is between an agent and a customer.
        - Your job is to evaluate whether the agent satisfies each of the expected outcomes.
        - Grade each expected outcome individually.

        FORMAT
        - Your response should be a JSON object with the following fields:
        - `reasoning`: a short explanation for your classification
        - `metExpectation`: `true` if the agent satisfies the expected outcomes, `false` otherwise
        - `expectedOutcome`: repeat the expectation from the input that you are grading
        
        Example response structure:
        {
            "results": [
                {
                    "expectedOutcome": "<one of the expected outcomes from the input>",
                    "reasoning": "<reasoning trace>",
                    "metExpectation": <false or true>,
                }
            ]
        }
        """


def conversation_text(trajectory: list[dict[str, Any]]) -> str:
    """The conversation as the judge reads it: `role: content`, one message a line (the system prompt left out)."""
    return "\n".join(f"{m.get('role')}: {m.get('content')}" for m in trajectory if m.get("role") != "system")


def judge_messages(trajectory: list[dict[str, Any]], assertions: list[str]) -> list[dict[str, Any]]:
    user = f"""
        conversation:
        {conversation_text(trajectory)}
        
        expectedOutcomes:
        {list(assertions)}
        """
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def read_reply(text: str) -> tuple[float | None, list[dict[str, Any]], str]:
    """(component reward or None, the per-assertion checks, why unreadable) from one judge reply."""
    try:
        data = json.loads(text)
        results = data.get("results", [])
        checks = [{"nl_assertion": r["expectedOutcome"], "met": _flag(r["metExpectation"]),
                   "justification": r["reasoning"]} for r in results]
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        return None, [], f"the judge's reply is not the JSON object the official evaluator reads ({exc})"
    return (1.0 if all(c["met"] for c in checks) else 0.0), checks, ""


def _flag(value: Any) -> bool:
    """A `metExpectation` as the official pydantic bool field reads it (true/false, 1/0, their strings)."""
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("true", "1", "yes", "on", "t", "y"):
            return True
        if low in ("false", "0", "no", "off", "f", "n"):
            return False
        raise ValueError(f"metExpectation {value!r} is not a boolean")
    if isinstance(value, (bool, int)) and value in (0, 1):
        return bool(value)
    raise ValueError(f"metExpectation {value!r} is not a boolean")
