"""`runner: replay`: score outputs produced elsewhere (another harness, a previous system), with no model.

    models:
      their-system:
        runner: replay
        path: preds/their_system.jsonl    # relative to the working folder, else to the config file's folder

One line per sample: `{"sample_id": "...", "output": "final text or null", "tool_calls": [{"name": "...",
"arguments": {...}}]}` (`tool_calls` optional). `sample_id` is the dataset's own id. A sample with no line is an
error row ("no prediction for sample <id> in <file>"), never skipped; duplicate ids are an error naming both
lines; a line that is not valid JSON names its line number (both stop the run before anything is written).

Without tools the recorded tool calls are stored as given (turn 0, not executed). On a split with `tools:`,
the replayed calls go through the same conversation loop as a live model: turn 0 issues them all (as parallel
calls), the tool layer answers them (fixtures, allowlist, live tools), turn 1 is the final output, so the
`tool_calls` table gets results and fixture hits exactly as for a model.

`path:` may also name an Inspect AI eval log (`*.eval`, docs/interop.md "Inspect AI logs"): each sample's final
completion is the output, the tool calls of its first tool-calling turn are replayed, a sample Inspect recorded as
an error is an error row with Inspect's message, and epoch e > 1 of sample `x` answers our row `x#epoch<e>`.

Either file is read under a size cap (`max_file_mb:`, default 512; docs/operations.md "Size caps on files read"):
a file, or an Inspect log member, over it is refused with one line naming it, before anything is inflated.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalpipe.core.config import ModelConfig
from evalpipe.core.errors import ConfigError, DataError
from evalpipe.core.file_caps import DEFAULT_CAP, OPTION, FileCap, file_sha256, model_cap, open_text
from evalpipe.runners.base import ModelError, Runner, register_runner
from evalpipe.tools.base import ChatTurn, ToolCall
from evalpipe.tools.execute import arguments_text, parse_arguments
from evalpipe.tools.replay import normalized_key
from evalpipe.core.types import Generation, RolloutRequest


def resolve_path(spec: str) -> Path:
    p = Path(spec).expanduser()
    if p.is_absolute() or p.exists():
        return p.resolve()
    from evalpipe.core.config import config_path

    beside = config_path().parent / p
    return beside.resolve() if beside.exists() else p.resolve()


def read_predictions(path: Path, cap: FileCap = DEFAULT_CAP) -> dict[str, dict[str, Any]]:
    """sample_id -> {"output", "tool_calls", "line"}; every problem names the file and the line. The file is read
    under `cap` (the model's option `max_file_mb`)."""
    if not path.is_file():
        raise ConfigError(f"replay file {path} not found; `path:` must name a JSONL file of "
                          '{"sample_id": ..., "output": ..., "tool_calls": [...]} lines')
    out: dict[str, dict[str, Any]] = {}
    with open_text(path, cap, encoding="utf-8-sig") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise DataError(f"{path} line {n}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(obj, dict) or "sample_id" not in obj:
                raise DataError(f"{path} line {n}: expected an object with \"sample_id\" and \"output\"")
            sid = str(obj["sample_id"])
            if sid in out:
                raise DataError(f"{path}: sample_id {sid!r} appears twice, on line {out[sid]['line']} and line {n}; "
                                "keep one prediction per sample")
            output = obj.get("output")
            if output is not None and not isinstance(output, str):
                output = json.dumps(output, ensure_ascii=False)
            calls = obj.get("tool_calls") or []
            if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str)
                                                      for c in calls):
                raise DataError(f"{path} line {n}: \"tool_calls\" must be a list of "
                                '{"name": "<tool>", "arguments": {...}}')
            out[sid] = {"output": output, "tool_calls": calls, "line": n}
    return out


@register_runner("replay")
class ReplayRunner(Runner):
    name = "replay"
    default_concurrency = 64
    option_schema = {"path", "inspect_task", "inspect_model", OPTION}  # `evalpipe validate` flags any other option (e.g. a misspelt `paht:`)

    def __init__(self, model: ModelConfig):
        super().__init__(model)
        spec = model.options.get("path") or model.model
        if not spec:
            raise ConfigError(f"model {model.key!r}: runner 'replay' needs `path:` (a JSONL file of predictions)")
        self.path = resolve_path(str(spec))
        cap = model_cap(model.key, model.options)
        from evalpipe.interop.inspect_log import is_inspect_log, read_outputs

        if is_inspect_log(self.path):  # a log, or a folder of logs (which of them: inspect_task / inspect_model)
            self.predictions = read_outputs(self.path, cap, model.options.get("inspect_task"),
                                            model.options.get("inspect_model"))
        else:
            self.predictions = read_predictions(self.path, cap)
        if self.path.is_dir():
            from evalpipe.core.fingerprint import fingerprint

            self.sha256 = fingerprint({str(f.relative_to(self.path)): file_sha256(f, cap)
                                       for f in sorted(self.path.rglob("*.eval"))})
        else:
            self.sha256 = file_sha256(self.path, cap)

    def identity(self) -> dict[str, Any]:
        return {"runner": self.name, "file_sha256": self.sha256}

    def _line(self, sample_id: str) -> dict[str, Any]:
        line = self.predictions.get(sample_id)
        if line is None:
            raise ModelError(f"no prediction for sample {sample_id} in {self.path}")
        if line.get("error"):  # the other harness's failure stays a failure (an Inspect log's sample error)
            raise ModelError(f"{line['error']} (recorded in {self.path})")
        return line

    async def generate(self, request: RolloutRequest) -> Generation:
        line = self._line(request.sample_id)
        if line.get("tool_records"):  # an Inspect log's conversation: every turn, each call with its result
            return Generation(text=line["output"], finish_reason="stop", input_tokens=0, output_tokens=0, cost=0.0,
                              trajectory=[*request.messages, *line["turns"]], tool_calls=line["tool_records"],
                              turns=sum(1 for m in line["turns"] if m["role"] == "assistant"),
                              stop_reason="final")
        records = []
        for i, c in enumerate(line["tool_calls"]):
            raw = c.get("arguments")
            args, _ = parse_arguments(raw)
            records.append({"turn": 0, "call_index": i, "name": c["name"],
                            "arguments": arguments_text(raw) if raw is not None else "{}",
                            "arguments_valid": args is not None,
                            "normalized_key": normalized_key(c["name"], args) if args is not None else None,
                            "result": None, "fixture_hit": None, "error": None if args is not None else
                            "invalid_arguments", "latency_s": 0.0})
        trajectory = list(request.messages)
        if records:
            trajectory.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{r['call_index']}", "type": "function",
                 "function": {"name": r["name"], "arguments": r["arguments"]}} for r in records]})
        trajectory.append({"role": "assistant", "content": line["output"]})
        return Generation(text=line["output"], finish_reason="stop", input_tokens=0, output_tokens=0, cost=0.0,
                          trajectory=trajectory if records else [], tool_calls=records,
                          turns=1 if records else None, stop_reason="final" if records else None)

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   request: RolloutRequest) -> ChatTurn:
        line = self._line(request.sample_id)
        first = not any(m.get("role") == "assistant" for m in messages[len(request.messages):])
        if first and line["tool_calls"]:
            return ChatTurn(content=None, finish_reason="tool_calls", input_tokens=0, output_tokens=0, cost=0.0,
                            tool_calls=[ToolCall(c["name"], c.get("arguments"), f"call_{i}")
                                        for i, c in enumerate(line["tool_calls"])])
        return ChatTurn(content=line["output"], finish_reason="stop", input_tokens=0, output_tokens=0, cost=0.0)
