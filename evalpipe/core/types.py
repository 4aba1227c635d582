"""Plain records passed between the stages. No Dagster here."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Sample:
    """One benchmark item as an adapter loads it."""

    id: str
    input: str
    target: str | None = None  # None: no ground truth (e.g. GAIA test answers are '?')
    metadata: dict[str, Any] = field(default_factory=dict)
    choices: list[str] | None = None
    system: str | None = None
    files: list[str] = field(default_factory=list)  # absolute paths of attachments
    # OpenAI function-tool schemas this sample may call ({"type": "function", "function": {...}}), with the
    # dataset's own tool names (dots allowed); None: no tools. See docs/interfaces.md.
    tools: list[dict[str, Any]] | None = None
    # The input as chat messages when the dataset gives them (`columns: {messages: ...}`); None: build from input.
    messages: list[dict[str, Any]] | None = None


@dataclass
class RolloutRequest:
    """What a runner gets for one sample."""

    sample_id: str
    messages: list[dict[str, Any]]
    fingerprint: str
    files: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    target: str | None = None  # only the echo runner's `reply: target` mode reads it (smoke tests)
    tools: list[dict[str, Any]] | None = None  # tool schemas (dataset names); None: a plain one-shot request
    # generation settings of this request, merged over the model's `params:` by the runners that take them
    # (an lm_eval task's generation_kwargs: max_tokens, temperature, stop, seed); None: the model's own
    params: dict[str, Any] | None = None


@dataclass
class Generation:
    """What a runner returns for one sample. `text` is the raw model output."""

    text: str | None
    finish_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None
    raw: Any = None  # provider response (JSON-able), kept for traces
    trajectory: list[dict[str, Any]] = field(default_factory=list)  # messages, tool calls, events
    # Multi-turn conversations (docs/interfaces.md): one record per tool call, in the `tool_calls` table's shape
    # without the partition/sample columns (turn, call_index, name, arguments, arguments_valid, normalized_key,
    # result, fixture_hit, error, latency_s); turns = model calls made; stop_reason = final | max_turns |
    # max_tool_calls | timeout (None for a one-shot request).
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    turns: int | None = None
    stop_reason: str | None = None


@dataclass
class Score:
    """One metric's verdict on one sample."""

    value: float | None  # None when unscored or errored
    correct: bool | None = None
    status: str = "scored"  # scored | unscored (no ground truth) | error | parse_error
    reason: str = ""
    normalized_prediction: str | None = None
    normalized_target: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def unscored(cls, reason: str = "no ground truth") -> "Score":
        return cls(value=None, status="unscored", reason=reason)

    @classmethod
    def error(cls, reason: str) -> "Score":
        return cls(value=None, status="error", reason=reason)
