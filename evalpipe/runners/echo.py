"""A deterministic runner for smoke tests: no model, no network."""
from __future__ import annotations

from typing import Any

from evalpipe.runners.base import Runner, register_runner
from evalpipe.types import Generation, RolloutRequest


@register_runner("echo")
class EchoRunner(Runner):
    """Replies with the last user message (`reply: input`, the default), the sample's ground truth
    (`reply: target`, a perfect model for checking scorers), or a fixed `text` (`reply: fixed`)."""

    name = "echo"
    default_concurrency = 64

    def identity(self) -> dict[str, Any]:
        return {"runner": self.name, "reply": self.model.options.get("reply", "input"),
                "text": self.model.options.get("text")}

    async def generate(self, request: RolloutRequest) -> Generation:
        mode = self.model.options.get("reply", "input")
        if mode == "target":
            text = request.target or ""
        elif mode == "fixed":
            text = str(self.model.options.get("text", ""))
        else:
            users = [m for m in request.messages if m.get("role") == "user"]
            text = str(users[-1]["content"]) if users else ""
        return Generation(text=text, finish_reason="stop", input_tokens=0, output_tokens=0, cost=0.0)
