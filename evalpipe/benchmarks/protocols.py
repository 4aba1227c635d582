"""Protocols of the data-science benchmarks (daeval, discoverybench, qrdata): how a model works on a sample.

`options.protocol` (benchmark or split; a run can't override it: docs/config.md):

- `multi_turn` (the default): the split offers the stateful `python` tool (the adapter turns on
  `tools: {python: true}` for the split when the config doesn't; the conversation loop of evalpipe/tools runs it
  in the sandbox, one interpreter per sample, with the sample's data files copied read-only into its working
  folder). The system prompt says so and gives the benchmark's answer format; the model's last reply is its
  answer. `max_turns` defaults to 15 for these benchmarks; `max_tool_calls` bounds the calls.
- `single_turn`: no tools, one reply, answer = the reply. The data files are named in the prompt (by file name, as
  they are in the working folder of the reply's code).
  With `execute_code` (default true), the reply's first fenced Python block is run once in the sandbox
  (`run_python`, the data files copied in, `code_timeout_s` 30) after the rollout, and the run is recorded as a
  `python` tool call (one row of `tool_calls`, the output in `result`) and at the end of the trajectory; it
  changes nothing in the answer.

Both are adapter behaviour, so the same model can be compared across protocols as separate partitions: evals.yaml
declares one split per protocol (e.g. `daeval/validation` and `daeval/validation_single`).
"""
from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from evalpipe.core.errors import ConfigError
from evalpipe.core.types import Sample

PROTOCOLS = ("multi_turn", "single_turn")
DEFAULT_PROTOCOL = "multi_turn"
DEFAULT_MAX_TURNS = 15
# Options every data-science adapter takes (besides the pipeline's own: limit, slice_by, tools, max_turns, ...).
COMMON_OPTIONS = ("path", "repo_id", "revision", "cache_dir", "token_env", "endpoint", "protocol", "execute_code",
                  "system_prompt", "code_timeout_s", "limit", "slice_by", "tools", "max_turns", "max_tool_calls", "tool_timeout_s",
                  "tool_output_cap", "prompt_wrapper", "max_file_mb")
# (no `shuffle`/`seed`: these adapters load in the benchmark's order and do not shuffle, so the options are refused)

MULTI_TURN_NOTE = (
    "You can run Python code with the `python` tool: it keeps its state between calls, and its working folder "
    "holds the data files named below (open them by file name, e.g. pandas.read_csv(\"{example}\")). pandas, "
    "numpy and scipy are available. Explore the data, compute what the question asks, and when you are done, "
    "reply without calling a tool: that last reply is your answer."
)
SINGLE_TURN_NOTE = (
    "Answer in a single reply. You may include one fenced ```python block showing the code that computes the "
    "answer (the data files named below are in its working folder), but the answer must be stated in the reply itself."
)

_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def protocol_of(options: dict[str, Any], split_key: str) -> str:
    value = str(options.get("protocol") or DEFAULT_PROTOCOL).strip().lower().replace("-", "_")
    if value not in PROTOCOLS:
        raise ConfigError(f"{split_key}: protocol must be one of {', '.join(PROTOCOLS)}, not {options.get('protocol')!r}")
    return value


_ADDED = "_protocol_added"  # what prepare_split added to a split's options (taken back for single_turn)


def without_protocol_additions(options: dict[str, Any]) -> dict[str, Any]:
    """A copy of split options without what `prepare_split` added to them (the `python` tool, `max_turns`): the
    options as configured, whether or not a stage has prepared the split yet."""
    added = options.get(_ADDED) or {}
    out = {k: v for k, v in options.items() if k != _ADDED}
    if added.get("python") and isinstance(out.get("tools"), dict):
        tools = {k: v for k, v in out["tools"].items() if k != "python"}
        if tools:
            out["tools"] = tools
        else:
            out.pop("tools")
    if added.get("max_turns"):
        out.pop("max_turns", None)
    return out


def prepare_split(split: Any, options: dict[str, Any]) -> None:
    """multi_turn: make sure the split offers the `python` tool and bounds the conversation at DEFAULT_MAX_TURNS.
    (The split's options are what the tool layer reads; the adapter is built before it in every stage.)"""
    if protocol_of(options, split.key) != "multi_turn":
        # options copied from a split this function prepared for multi_turn (a run-time protocol override): take
        # back what it added, so a single_turn run is offered no tool
        for target in (split.options, options):
            added = target.pop(_ADDED, None) or {}
            if added.get("python") and isinstance(target.get("tools"), dict):
                tools = {k: v for k, v in target["tools"].items() if k != "python"}
                if tools:
                    target["tools"] = tools
                else:
                    target.pop("tools")
            if added.get("max_turns"):
                target.pop("max_turns", None)
        return
    for target in (split.options, options):
        tools = target.get("tools")
        tools = dict(tools) if isinstance(tools, dict) else {}
        added = dict(target.get(_ADDED) or {})
        if "python" not in tools:
            tools["python"] = True
            added["python"] = True
        target["tools"] = tools
        if "max_turns" not in target:
            target["max_turns"] = DEFAULT_MAX_TURNS
            added["max_turns"] = True
        if added:
            target[_ADDED] = added


def apply_protocol(sample: Sample, options: dict[str, Any], split_key: str, answer_rules: str) -> Sample:
    """Set the sample's tools, system prompt and protocol metadata for the split's protocol."""
    protocol = protocol_of(options, split_key)
    names = [p.rsplit("/", 1)[-1] for p in sample.files]
    example = names[0] if names else "data.csv"
    note = MULTI_TURN_NOTE.format(example=example) if protocol == "multi_turn" else SINGLE_TURN_NOTE
    custom = options.get("system_prompt", None)
    if custom is not None:  # the user's own instructions replace ours entirely (null: no system prompt)
        sample.system = str(custom) if custom else None
    else:
        sample.system = f"{answer_rules}\n\n{note}"
    sample.tools = None  # multi_turn: the split's `tools: {python: true}` offers the real tool (prepare_split)
    sample.metadata["protocol"] = protocol
    sample.metadata["data_files"] = names
    if protocol == "single_turn":
        sample.metadata["execute_code"] = bool(options.get("execute_code", True))
    return sample


def reply_code(text: str | None) -> str | None:
    """The code of the first fenced Python block of a reply (single_turn), or None."""
    m = _FENCE.search(text or "")
    return m.group(1) if m and m.group(1).strip() else None


def files_block(paths: list[str], protocol: str) -> str:
    """The data files by name, as they are in the working folder of the model's code in both protocols."""
    if not paths:
        return ""
    where = "in your working folder" if protocol == "multi_turn" else "in the working folder where your code runs"
    return f"Data files ({where}):\n" + "\n".join(f"- {p.replace(chr(92), '/').rsplit('/', 1)[-1]}" for p in paths)


def _loads(v: Any, default: Any) -> Any:
    if isinstance(v, str) and v:
        try:
            return json.loads(v)
        except ValueError:
            return default
    return v if v is not None else default


def execute_reply_code(df: Any, prompts: Any, options: dict[str, Any], split_key: str) -> Any:
    """single_turn with `execute_code`: run each ok reply's first fenced Python block once in the sandbox and record
    it as a `python` tool call (tool_trace / tool_calls) and as the last events of the trajectory."""
    if protocol_of(options, split_key) != "single_turn" or not options.get("execute_code", True) or df.empty:
        return df
    from evalpipe import sandbox

    timeout = float(options.get("code_timeout_s", 30))
    files = {sid: _loads(f, []) for sid, f in zip(prompts["sample_id"], prompts["files"])}
    messages = {sid: _loads(m, []) for sid, m in zip(prompts["sample_id"], prompts["messages"])}
    todo = [(i, r.sample_id, reply_code(r.raw_output)) for i, r in df.iterrows() if r.status == "ok"]
    todo = [t for t in todo if t[2]]
    if not todo:
        return df

    def run(item: tuple[Any, str, str]) -> tuple[Any, str, str, Any, float]:
        i, sid, code = item
        start = time.monotonic()
        return i, sid, code, sandbox.run_python(code, timeout_s=timeout, files=files.get(sid) or [],
                                                backend=options.get("sandbox")), time.monotonic() - start

    with ThreadPoolExecutor(max_workers=4) as pool:
        done = list(pool.map(run, todo))
    df = df.copy()
    for col in ("tool_trace", "trajectory"):
        df[col] = df[col].astype(object)
    for i, sid, code, res, latency in done:
        result = {"ok": res.passed, "status": res.status, "stdout": res.stdout, "stderr": res.stderr}
        if res.error:
            result["error"] = res.error
        arguments = json.dumps({"code": code}, ensure_ascii=False)
        record = {"turn": 0, "call_index": 0, "name": "python", "arguments": arguments, "arguments_valid": True,
                  "normalized_key": None, "result": json.dumps(result, ensure_ascii=False), "fixture_hit": None,
                  "error": None if res.passed else (res.status if res.status == "timeout" else res.error or res.status),
                  "latency_s": round(latency, 4)}
        trajectory = _loads(df.at[i, "trajectory"], []) or [*messages.get(sid, []),
                                                             {"role": "assistant", "content": df.at[i, "raw_output"]}]
        trajectory = [*trajectory,
                      {"role": "assistant", "content": None, "tool_calls": [
                          {"id": "single_turn_exec", "type": "function",
                           "function": {"name": "python", "arguments": arguments}}]},
                      {"role": "tool", "tool_call_id": "single_turn_exec", "name": "python", "content": record["result"]}]
        df.at[i, "tool_trace"] = json.dumps([record], ensure_ascii=False)
        df.at[i, "trajectory"] = json.dumps(trajectory, ensure_ascii=False) if isinstance(df.at[i, "trajectory"], str) \
            or df.at[i, "trajectory"] is None else trajectory
        if "tool_calls" in df.columns:
            df.at[i, "tool_calls"] = 1
    return df
