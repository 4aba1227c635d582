"""A deterministic runner for smoke tests: no model, no network.

`reply: script` makes it a scripted model (our mockllm) for tool-use tests: `script:` names a JSONL file (or
gives a list inline), one line per sample, `{"sample_id": "...", "turns": [{"content": ..., "tool_calls":
[{"name": ..., "arguments": {...}}]}, ...]}`: turn k of the conversation answers with `turns[k]` (past the end:
the last turn's content, no calls). Tool names are the dataset's.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel

from evalpipe.core.errors import ConfigError
from evalpipe.runners.base import ModelError, Runner, register_runner
from evalpipe.tools.base import ChatTurn, ToolCall
from evalpipe.core.types import Generation, RolloutRequest


class EchoOptions(BaseModel):
    """The echo runner's options (checked with the config and with `--runner-option`)."""

    reply: Optional[Literal["input", "target", "fixed", "script"]] = None
    text: Optional[str] = None  # reply: fixed
    script: Any = None  # reply: script (a JSONL file or an inline list)


@register_runner("echo")
class EchoRunner(Runner):
    """Replies with the last user message (`reply: input`, the default), the sample's ground truth
    (`reply: target`, a perfect model for checking scorers), or a fixed `text` (`reply: fixed`)."""

    name = "echo"
    default_concurrency = 64
    option_schema = EchoOptions

    def __init__(self, model):
        super().__init__(model)
        self.script = load_script(model.options.get("script")) if model.options.get("reply") == "script" else None

    def identity(self) -> dict[str, Any]:
        return {"runner": self.name, "reply": self.model.options.get("reply", "input"),
                "text": self.model.options.get("text"), **({"script": self.script} if self.script else {})}

    def _turns(self, request: RolloutRequest) -> list[dict[str, Any]]:
        turns = (self.script or {}).get(request.sample_id)
        if turns is None:
            raise ModelError(f"echo script has no turns for sample {request.sample_id}")
        return turns

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   request: RolloutRequest) -> ChatTurn:
        """One scripted assistant turn: turn k of the conversation is `turns[k]`."""
        if self.script is None:  # the other modes answer at once, without calling tools
            gen = await self.generate(request)
            return ChatTurn(content=gen.text, finish_reason="stop", input_tokens=0, output_tokens=0, cost=0.0)
        turns = self._turns(request)
        k = sum(1 for m in messages[len(request.messages):] if m.get("role") == "assistant")
        if k >= len(turns):
            return ChatTurn(content=turns[-1].get("content") if turns else "", finish_reason="stop",
                            input_tokens=0, output_tokens=0, cost=0.0)
        t = turns[k]
        calls = [ToolCall(c["name"], c.get("arguments"), c.get("id") or f"call_{k}_{i}")
                 for i, c in enumerate(t.get("tool_calls") or [])]
        return ChatTurn(content=t.get("content"), tool_calls=calls, finish_reason="tool_calls" if calls else "stop",
                        input_tokens=0, output_tokens=0, cost=0.0)

    async def generate(self, request: RolloutRequest) -> Generation:
        mode = self.model.options.get("reply", "input")
        if mode == "script":
            turns = self._turns(request)
            return Generation(text=turns[-1].get("content") if turns else "", finish_reason="stop", input_tokens=0,
                              output_tokens=0, cost=0.0)
        if mode == "target":
            text = request.target or ""
        elif mode == "fixed":
            text = str(self.model.options.get("text", ""))
        else:
            users = [m for m in request.messages if m.get("role") == "user"]
            text = str(users[-1]["content"]) if users else ""
        return Generation(text=text, finish_reason="stop", input_tokens=0, output_tokens=0, cost=0.0)


def load_script(spec: Any) -> dict[str, list[dict[str, Any]]]:
    """sample_id -> scripted turns, from a JSONL file or an inline list of {sample_id, turns}."""
    import json
    from pathlib import Path

    if spec is None:
        raise ConfigError("echo runner with reply: script needs `script:` (a JSONL file or a list of "
                          "{sample_id, turns})")
    if isinstance(spec, (str, Path)):
        from evalpipe.runners.replay import resolve_path

        path = resolve_path(str(spec))
        if not path.is_file():
            raise ConfigError(f"echo script {path} not found")
        items = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    items.append(json.loads(line))
                except ValueError as exc:
                    raise ConfigError(f"echo script {path} line {n}: not valid JSON ({exc.msg})") from None
    else:
        items = list(spec)
    out: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        if not isinstance(item, dict) or "sample_id" not in item or not isinstance(item.get("turns"), list):
            raise ConfigError(f"echo script entry {str(item)[:80]!r} needs sample_id and a list of turns")
        out[str(item["sample_id"])] = item["turns"]
    return out
