"""Inspect AI eval logs (the `.eval` format), out and in, with inspect_ai's own log types and writer.

Out (`evalpipe export --format inspect`): one log per partition. The task is the benchmark split, the model the
model key; each sample carries its prompt as `input`, the whole conversation as `messages` (the agent's
trajectory when it has one), the final reply as `output`, one score per metric (value, answer, explanation, the
verdict in metadata), its model usage, and one ModelEvent per assistant turn plus one ToolEvent per tool call.
`results` holds the partition's metrics (slice `all`) with their stderr and interval. The samples come from
`artifacts.stream_samples`, so what the run artifacts mask (secrets, PII) is masked here too.

In (`runner: replay` with `path: <log>.eval`): `read_outputs` gives each sample's final output and tool calls,
keyed by our row id (epoch e > 1 of sample `x` is `x#epoch<e>`), so an Inspect run is re-scored by our metrics
and compared and ranked beside ours. `read_samples` gives the log's samples (id, input, target) for the
`inspect_log` adapter, when the benchmark itself exists only as the log. Both read under a size cap
(evalpipe/core/file_caps.py): a log that inflates past it is refused before Inspect inflates anything.
"""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalpipe.core.errors import ConfigError, DataError
from evalpipe.core.file_caps import DEFAULT_CAP, FileCap, FileTooLarge, check_zip, read_bytes
from evalpipe.core.run_marks import base_id, epoch_id

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _inspect():
    try:
        import inspect_ai.log  # noqa: F401  (optional: only the Inspect commands pay for it)
    except ImportError:
        raise ConfigError("Inspect AI logs need inspect-ai: pip install 'evalpipe[interop]' "
                          "(or `make`, which installs the pinned extras)") from None


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def log_name(split_key: str, model_key: str) -> str:
    """The file name of a partition's log: its split and model, made safe for a file name."""
    return f"{_UNSAFE.sub('_', split_key)}__{_UNSAFE.sub('_', model_key)}.eval"


# ---- out ------------------------------------------------------------------------------------------------------------
def _arguments(text: Any) -> tuple[dict[str, Any], str | None]:
    """A tool call's arguments as Inspect's dict, and the parse error when the model's text was not a JSON object."""
    if isinstance(text, dict):
        return text, None
    try:
        value = json.loads(text) if text else {}
    except (TypeError, ValueError) as exc:
        return {}, f"arguments are not valid JSON: {exc}"
    return (value, None) if isinstance(value, dict) else ({}, "arguments are not a JSON object")


def _text(content: Any) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def chat_messages(messages: list[dict[str, Any]], model: str) -> list[Any]:
    """OpenAI-style chat messages (ours) as Inspect ChatMessages. Written here rather than with inspect_ai's
    `messages_from_openai`: that one merges an assistant's tool-call turn into its following reply, which would
    move the reply before the tool results."""
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageTool, ChatMessageUser
    from inspect_ai.tool import ToolCall

    out: list[Any] = []
    for m in messages:
        role = m.get("role")
        if role in ("system", "developer"):
            out.append(ChatMessageSystem(content=_text(m.get("content"))))
        elif role == "user":
            out.append(ChatMessageUser(content=_text(m.get("content"))))
        elif role == "assistant":
            calls = []
            for i, c in enumerate(m.get("tool_calls") or []):
                fn = c.get("function") or c
                args, error = _arguments(fn.get("arguments"))
                calls.append(ToolCall(id=str(c.get("id") or f"call_{i}"), function=str(fn.get("name")),
                                      arguments=args, parse_error=error))
            out.append(ChatMessageAssistant(content=_text(m.get("content")), tool_calls=calls or None, model=model,
                                            source="generate"))
        elif role == "tool":
            out.append(ChatMessageTool(content=_text(m.get("content")), tool_call_id=m.get("tool_call_id"),
                                       function=m.get("name")))
    return out


def _events(messages: list[Any], tool_records: list[dict[str, Any]], model: str, usage: Any) -> list[Any]:
    """One ModelEvent per assistant turn (its input: the conversation before it) and, after a turn that calls
    tools, one ToolEvent per call with the tool's result or error (from the `tool_calls` records)."""
    from inspect_ai.event import ModelEvent, ToolEvent
    from inspect_ai.model import ChatMessageAssistant, GenerateConfig, ModelOutput
    from inspect_ai.tool import ToolCallError

    records = {(r.get("turn"), r.get("call_index")): r for r in tool_records or []}
    events: list[Any] = []
    turn = 0
    assistant_at = [i for i, m in enumerate(messages) if isinstance(m, ChatMessageAssistant)]
    for i in assistant_at:
        m = messages[i]
        output = ModelOutput.from_message(m, stop_reason="tool_calls" if m.tool_calls else "stop")
        if i == assistant_at[-1]:
            output.usage = usage  # we keep usage per sample, not per turn: on the last turn
        events.append(ModelEvent(model=model, input=messages[:i], tools=[], tool_choice="auto",
                                 config=GenerateConfig(), output=output))
        for k, call in enumerate(m.tool_calls or []):
            rec = records.get((turn, k), {})
            error = rec.get("error")
            events.append(ToolEvent(id=call.id, function=call.function, arguments=call.arguments,
                                    result=_text(rec.get("result")),
                                    error=ToolCallError("unknown", str(error)) if error else None))
        turn += 1
    return events


def _score(fields: dict[str, Any], prediction: Any) -> Any:
    from inspect_ai.scorer import Score

    return Score(value=float(fields["score"]), answer=None if prediction is None else str(prediction),
                 explanation=fields.get("reason"),
                 metadata={k: fields.get(k) for k in ("correct", "status", "normalized_prediction",
                                                       "normalized_target")})


def eval_sample(record: dict[str, Any], model_key: str) -> Any:
    """One samples.jsonl record (evalpipe/store/artifacts.py) as an Inspect EvalSample."""
    from inspect_ai.log import EvalError, EvalSample
    from inspect_ai.model import ChatMessageAssistant, ModelOutput, ModelUsage

    row_id = str(record["sample_id"])
    sample_id = base_id(row_id)  # our row `x#epoch3` is Inspect's sample x, epoch 3
    epoch = int(row_id[len(sample_id) + len("#epoch"):]) if sample_id != row_id else 1
    prompt = record.get("prompt")
    prompt = prompt if isinstance(prompt, list) else [{"role": "user", "content": _text(prompt)}]
    trajectory = record.get("trajectory") or None
    conversation = list(trajectory) if trajectory else list(prompt)
    if not trajectory and record.get("status") == "ok":
        conversation.append({"role": "assistant", "content": record.get("raw_output")})
    messages = chat_messages(conversation, model_key)
    u = record.get("usage") or {}
    tokens_in, tokens_out = int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0)
    usage = ModelUsage(input_tokens=tokens_in, output_tokens=tokens_out, total_tokens=tokens_in + tokens_out,
                       total_cost=u.get("cost"))
    last = next((x for x in reversed(messages) if isinstance(x, ChatMessageAssistant)), None)
    if record.get("status") != "ok" or last is None:
        output = ModelOutput(model=model_key, error=record.get("error"))
    else:
        output = ModelOutput.from_message(last, stop_reason="stop")
        output.completion = _text(record.get("raw_output")) or last.text
    output.usage = usage
    scores = {name: _score(f, record.get("prediction")) for name, f in (record.get("scores") or {}).items()
              if f.get("score") is not None}  # an unscored sample has no value to give (its reason stays below)
    unscored = {name: f.get("reason") for name, f in (record.get("scores") or {}).items() if f.get("score") is None}
    target = record.get("target")
    return EvalSample(
        id=sample_id, epoch=epoch,
        input=chat_messages(prompt, model_key), target="" if target is None else _text(target),
        messages=messages, output=output, scores=scores or None,
        metadata={**(record.get("metadata") or {}), **({"evalpipe_unscored": unscored} if unscored else {}),
                  **({"evalpipe_slices": record["slices"]} if record.get("slices") else {})},
        model_usage={model_key: usage} if tokens_in or tokens_out or u.get("cost") else {},
        events=_events(messages, record.get("tool_calls") or [], model_key, usage),
        total_time=u.get("latency_s"),
        error=(EvalError(message=str(record.get("error") or record.get("status")), traceback="", traceback_ansi="")
               if record.get("status") not in (None, "ok") else None),
    )


def _results(wh: Any, split_key: str, model_key: str, samples: list[Any]) -> Any:
    """The partition's metrics (slice `all`) as Inspect EvalScores: one per metric, its value as `mean` (the
    name Inspect's viewer shows first) with `stderr`, `ci_low` and `ci_high` beside it when we have them."""
    from inspect_ai.log import EvalMetric, EvalResults, EvalScore

    rows = wh.query("SELECT metric, value, n, n_unscored, stderr, ci_low, ci_high, higher_is_better, kind "
                    "FROM metrics WHERE benchmark_split = ? AND model = ? AND slice = 'all' ORDER BY metric",
                    [split_key, model_key]).to_dict("records")
    scores = []
    for r in rows:
        r = {k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()}  # NaN -> None
        if r["value"] is None:
            continue  # nothing scored: Inspect's metric values are numbers
        metrics = {"mean": EvalMetric(name="mean", value=float(r["value"]))}
        for name in ("stderr", "ci_low", "ci_high"):
            if r[name] is not None:
                metrics[name] = EvalMetric(name=name, value=float(r[name]))
        scores.append(EvalScore(name=r["metric"], scorer=r["metric"], scored_samples=int(r["n"] or 0),
                                unscored_samples=int(r["n_unscored"] or 0), metrics=metrics,
                                metadata={"higher_is_better": r["higher_is_better"], "kind": r["kind"]}))
    completed = sum(1 for s in samples if s.error is None)
    return EvalResults(total_samples=len(samples), completed_samples=completed, scores=scores)


def eval_log(split_key: str, model_key: str, wh: Any) -> Any:
    """A partition as an Inspect EvalLog (read from the warehouse `wh`)."""
    _inspect()
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalSpec, EvalStats
    from inspect_ai.model import ModelUsage

    from evalpipe.store.artifacts import package_versions, stream_samples

    lines: list[str] = []
    info = stream_samples(split_key, model_key, wh, lambda name, text: lines.extend(
        text.splitlines()) if name == "samples.jsonl" else None)
    records = [json.loads(line) for line in lines if line.strip()]
    records.sort(key=lambda r: (r.get("sample_index") is None, r.get("sample_index") or 0, str(r["sample_id"])))
    samples = [eval_sample(r, model_key) for r in records]
    usage = ModelUsage()
    for s in samples:
        for u in s.model_usage.values():
            usage = usage + u
    epochs = max((s.epoch for s in samples), default=1)
    now = datetime.now(timezone.utc).isoformat()
    spec = EvalSpec(
        created=now, task=split_key, task_id=split_key, run_id=f"evalpipe:{split_key}:{model_key}",
        dataset=EvalDataset(name=split_key, samples=len({s.id for s in samples}),
                            sample_ids=list(dict.fromkeys(str(s.id) for s in samples))),
        model=model_key, config=EvalConfig(epochs=epochs),
        packages={k: v for k, v in {**package_versions(), "inspect_ai": _version("inspect-ai")}.items()
                  if k in ("evalpipe", "inspect_ai") and v},
        metadata={"evalpipe": {"benchmark_split": split_key, "model": model_key,
                               "fingerprints": info["fingerprints"], "counts": info["counts"]}},
    )
    return EvalLog(status="success", eval=spec, samples=samples,
                   results=_results(wh, split_key, model_key, samples),
                   stats=EvalStats(started_at=now, completed_at=now,
                                   model_usage={model_key: usage} if usage.total_tokens or usage.total_cost else {}))


def write_logs(partitions: list[tuple[str, str]], wh: Any, out_dir: str | Path) -> list[Path]:
    """One `.eval` log per (split, model) partition in `out_dir`; the paths written."""
    _inspect()
    from inspect_ai.log import write_eval_log

    folder = Path(out_dir)
    paths = []
    for split_key, model_key in partitions:
        log = eval_log(split_key, model_key, wh)  # first: a partition never materialized leaves no folder behind
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / log_name(split_key, model_key)
        write_eval_log(log, str(path), format="eval")
        paths.append(path)
    return paths


# ---- in -------------------------------------------------------------------------------------------------------------
def is_inspect_log(path: str | Path) -> bool:
    """An Inspect `.eval` log, or a folder holding them (an `inspect eval-set` log dir)."""
    p = Path(path)
    return str(path).endswith(".eval") or (p.is_dir() and next(p.rglob("*.eval"), None) is not None)


def _read(path: Path, cap: FileCap) -> Any:
    """The log, read under `cap`: the archive's bytes, then its members' sizes from the central directory, before
    Inspect inflates anything (a 1.6 MB log whose sample inflated to 1.5 GB took 8 GB and an abort). Inspect reads
    the checked bytes through Python's zipfile, which stops each member at its recorded size."""
    import io
    import zipfile

    _inspect()
    from inspect_ai.log import read_eval_log

    if not path.is_file():
        raise ConfigError(f"Inspect log {path} not found; `path:` must name an Inspect `.eval` log "
                          "(e.g. one `inspect eval` wrote to ./logs)")
    data = read_bytes(path, cap, decompress=False)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            check_zip(zf, cap, path)
        log = read_eval_log(io.BytesIO(data), format="eval")
    except FileTooLarge:
        raise
    except Exception as exc:  # a zip that is not a log, a log of a newer format: say which file
        raise DataError(f"{path}: not a readable Inspect eval log ({type(exc).__name__}: {exc})".splitlines()[0]) \
            from None
    return log


def log_files(path: Path, cap: FileCap = DEFAULT_CAP, task: str | None = None, model: str | None = None) -> list[Path]:
    """The logs a `path:` names: the file itself, or, for a folder (an `inspect eval-set` log dir), every `.eval`
    log under it whose task and model are `task` / `model` (read from the logs' headers). A folder holding more than
    one task or model without the choice is refused in one line naming them."""
    if not path.is_dir():
        return [path]
    _inspect()
    from inspect_ai.log import read_eval_log

    headers = []
    for f in sorted(path.rglob("*.eval")):
        import zipfile

        try:
            with zipfile.ZipFile(f) as zf:
                check_zip(zf, cap, f)
            h = read_eval_log(str(f), header_only=True)
        except FileTooLarge:
            raise
        except Exception as exc:
            raise DataError(f"{f}: not a readable Inspect eval log ({type(exc).__name__}: {exc})".splitlines()[0]) \
                from None
        headers.append((f, h.eval.task, h.eval.model))
    if not headers:
        raise ConfigError(f"{path} holds no Inspect `.eval` logs; `path:` must name a log or a folder of logs")
    chosen = [(f, t, m) for f, t, m in headers if (task is None or t == task) and (model is None or m == model)]
    for name, value, k in (("task", task, 1), ("model", model, 2)):
        found = sorted({h[k] for h in chosen})
        if value is None and len(found) > 1:
            raise ConfigError(f"{path} holds logs of {len(found)} {name}s ({', '.join(found)}); choose one with "
                              f"`inspect_{name}: <{name}>` beside `path:`")
    if not chosen:
        raise ConfigError(f"{path} holds no log of task {task!r} and model {model!r}; its logs are of "
                          + ", ".join(sorted({f"{t} x {m}" for _, t, m in headers})))
    return [f for f, _, _ in chosen]


def _turns(messages: list[Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A sample's conversation from its first assistant turn on, as our chat messages (tool calls with their ids,
    tool results as `tool` messages), and one `tool_calls` record per call with the tool's result or error."""
    results = {m.tool_call_id: m for m in messages if m.role == "tool"}
    first = next((i for i, m in enumerate(messages) if m.role == "assistant"), len(messages))
    turns: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    turn = 0
    for m in messages[first:]:
        if m.role == "assistant":
            calls = list(m.tool_calls or [])
            msg: dict[str, Any] = {"role": "assistant", "content": m.text or (None if calls else "")}
            if calls:
                msg["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                    "name": c.function, "arguments": json.dumps(c.arguments, ensure_ascii=False)}} for c in calls]
            turns.append(msg)
            for k, c in enumerate(calls):
                res = results.get(c.id)
                err = getattr(res, "error", None) if res is not None else None
                records.append({"turn": turn, "call_index": k, "name": c.function,
                                "arguments": json.dumps(c.arguments, ensure_ascii=False), "arguments_valid":
                                c.parse_error is None, "normalized_key": None,
                                "result": res.text if res is not None else None, "fixture_hit": None,
                                "error": (err.message if err is not None else None), "latency_s": 0.0})
            turn += 1
        elif m.role == "tool":
            turns.append({"role": "tool", "tool_call_id": m.tool_call_id, "name": m.function, "content": m.text})
        else:  # a user turn inside the conversation (an agent's follow-up)
            turns.append({"role": m.role, "content": m.text})
    return turns, records


def read_outputs(path: str | Path, cap: FileCap = DEFAULT_CAP, task: str | None = None,
                 model: str | None = None) -> dict[str, dict[str, Any]]:
    """row id -> {"output", "tool_calls", "error", "line", "turns", "tool_records"} of each sample in the log, or in
    each log of a folder (`log_files`) (the shape of runners/replay.py `read_predictions`; `line` is the sample's
    position). `output` is the final completion; `tool_calls` those of the sample's first assistant turn that calls
    tools (replay issues them on turn 0 on a split with `tools:`); `turns` the conversation from the first
    assistant turn on with the tool results, `tool_records` each call with its result (replayed as recorded on a
    split without `tools:`); `error` the sample's error."""
    out: dict[str, dict[str, Any]] = {}
    for f in log_files(Path(path), cap, task, model):
        log = _read(f, cap)
        for n, s in enumerate(log.samples or [], 1):
            rid = epoch_id(str(s.id), int(s.epoch or 1))
            if rid in out:
                raise DataError(f"{f}: sample {s.id!r} epoch {s.epoch} appears twice (samples {out[rid]['line']} "
                                f"and {n}); keep one per sample and epoch")
            calls: list[dict[str, Any]] = []
            for m in s.messages:
                if m.role == "assistant" and m.tool_calls:
                    calls = [{"name": c.function, "arguments": c.arguments} for c in m.tool_calls]
                    break
            turns, records = _turns(list(s.messages))
            # no choices and no completion: the model never answered (None, not an empty reply)
            output = s.output.completion if s.output.choices or s.output.completion else None
            error = s.error.message if s.error is not None else None
            out[rid] = {"output": output, "tool_calls": calls, "error": error, "line": n,
                        "turns": turns if records else [], "tool_records": records}
    return out


def read_samples(path: str | Path, cap: FileCap = DEFAULT_CAP, task: str | None = None,
                 model: str | None = None) -> list[dict[str, Any]]:
    """The log's samples (first epoch) as dataset rows: id, input (text, or chat messages), target, metadata. A list
    target (any of them is right, in Inspect) becomes its first item for our metrics, the list kept in
    `metadata.inspect_targets`; each scorer's value in `metadata.inspect_scores`, the log's output in
    `metadata.inspect_output` and the log's metrics per scorer in `metadata.inspect_metrics`. A folder: the
    samples of each of its logs (`log_files`), an id seen twice refused."""
    rows: list[dict[str, Any]] = []
    seen: dict[str, Path] = {}
    for f in log_files(Path(path), cap, task, model):
        for row in _samples_of(_read(f, cap)):
            if row["id"] in seen:
                raise DataError(f"{path}: sample {row['id']!r} is in {seen[row['id']].name} and {f.name}; choose "
                                "the logs' task with `inspect_task:`, or keep one log per sample")
            seen[row["id"]] = f
            rows.append(row)
    return rows


def _samples_of(log: Any) -> list[dict[str, Any]]:
    # the log's own figures per scorer, kept beside ours (metric inspect_scores, evalpipe/metrics/inspect_scores.py)
    own = {sc.name: {"samples": sc.scored_samples, "metrics": {m.name: m.value for m in sc.metrics.values()}}
           for sc in ((log.results.scores if log.results else None) or [])}
    rows = []
    for s in log.samples or []:
        if int(s.epoch or 1) != 1:
            continue
        if isinstance(s.input, str):
            input_ = s.input
        else:
            input_ = [{"role": m.role, "content": m.text} for m in s.input]
        metadata = {k: v for k, v in (s.metadata or {}).items() if not k.startswith("evalpipe_")}
        if isinstance(s.target, str):
            target = s.target
        else:  # Inspect's list target: any of them is right. Our metrics take one target: the first, all kept
            target = s.target[0] if s.target else ""
            metadata["inspect_targets"] = list(s.target)
        if s.scores:  # each scorer's own value for the log's own output, read back by metric inspect_scores
            metadata["inspect_scores"] = {name: sc.value for name, sc in s.scores.items()}
            metadata["inspect_output"] = s.output.completion if s.output.choices or s.output.completion else None
            metadata["inspect_metrics"] = own
        rows.append({"id": str(s.id), "input": input_, "target": target, "choices": s.choices, "metadata": metadata})
    return rows
