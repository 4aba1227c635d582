"""A priced loopback endpoint: the mock chat server (benchmarks/mock_server.py) that also counts what it served,
in tokens and at a fixed price, so tests can hold a run's recorded spend against what the endpoint counted."""
from __future__ import annotations

import json
import threading
from typing import Any

from benchmarks.mock_server import MockLLM

PRICE_IN, PRICE_OUT = 0.001, 0.002  # USD per token (the models' `options.pricing` in the tests)
PRICING = {"input_cost_per_token": PRICE_IN, "output_cost_per_token": PRICE_OUT}


class PricedMock(MockLLM):
    """`served`: the usage of every chat reply it sent, [(prompt, input_tokens, output_tokens)]."""

    def __init__(self, latency: float = 0.0, answers: dict[str, str] | None = None):
        super().__init__(latency=latency, answers=answers, keep_bodies=True)
        self.served: list[tuple[str, int, int]] = []
        self._lock = threading.Lock()

    def handle(self, method: str, path: str, body: bytes):
        result = super().handle(method, path, body)
        if result is not None and method == "POST" and path.endswith("/chat/completions") and result[0] == 200:
            reply = json.loads(result[2])
            users = [m for m in json.loads(body).get("messages") or [] if m.get("role") == "user"]
            with self._lock:
                self.served.append((str(users[-1]["content"]) if users else "", reply["usage"]["prompt_tokens"],
                                    reply["usage"]["completion_tokens"]))
        return result

    def tokens(self) -> int:
        return sum(i + o for _, i, o in self.served)

    def cost(self) -> float:
        return sum(i * PRICE_IN + o * PRICE_OUT for _, i, o in self.served)

    def max_request_cost(self) -> float:
        return max((i * PRICE_IN + o * PRICE_OUT for _, i, o in self.served), default=0.0)


def priced_model(base_url: str, key: str = "m", model: str = "openai/mock", **options: Any):
    """A litellm ModelConfig on the mock, priced at PRICING."""
    from evalpipe.core.config import ModelConfig

    return ModelConfig.from_dict(key, {"runner": "litellm", "model": model, "api_base": base_url,
                                       "options": {"pricing": PRICING, **options}})
