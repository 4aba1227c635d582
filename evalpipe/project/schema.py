"""The config file's schema: every key, type and range, checked before anything runs (docs/config.md).

`load_config` calls `validate_config` on every load, so `evalpipe run`, `evalpipe validate` and the Dagster code
location all refuse a bad config before the first model call. A mistake is reported as one line,
`<file>:<line>: <where>: <what is wrong>` (a ConfigError, exit 2 in the CLI); line numbers come from the YAML
nodes, which a custom loader keeps while it also refuses duplicate keys (plain YAML lets the last one win).

Layers:
- the structure (pydantic models below): top-level keys, benchmarks, splits, models, judges, options with
  their types and ranges; an unknown key gets a "did you mean" from the known ones (difflib);
- names: adapters, runners and metrics against their registries (after importing `plugins:` modules);
- declared options: every built-in runner, adapter and metric declares `option_schema` (a pydantic model class,
  or a set of option names); a model's options, a benchmark split's options and a metric entry's settings are
  checked against it, with a "did you mean" for unknown names (`check_run_options` does the same for the options
  a run adds: `--benchmark-option`, `--runner-option`, `evaluate(...)`). Not declared (a plugin's): its options
  are free-form, and `evalpipe validate` prints a note;
- judges: a metric with `needs_judge` (model-graded) must get one, from its entry or from `judges:`.
"""
from __future__ import annotations

import difflib
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from evalpipe.core.errors import ConfigError
from evalpipe.core.file_caps import read_config_text
from evalpipe.core.run_marks import is_limited
from evalpipe.core.redact import PII_ENTITIES
from evalpipe.project.plugins import import_module, nothing_registered_hint

Loc = tuple  # a path into the config: ("benchmarks", "smoke", "options", "limit")


# ---- YAML with line numbers, refusing duplicate keys -------------------------------------------------------------
class _LineLoader(yaml.SafeLoader):
    pass


def _index(node: yaml.Node, loc: Loc, lines: dict[Loc, int], path: Path, seen_nodes: set[int],
           dups: list[tuple[int, str]]) -> None:
    if id(node) in seen_nodes:  # an alias of an anchored node: indexed once
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[Any, int] = {}
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode) or k.tag == "tag:yaml.org,2002:merge":
                continue
            key = k.value
            line = k.start_mark.line + 1
            if key in first:
                where = ".".join(str(p) for p in loc + (key,))
                dups.append((line, f"{path}:{line}: {where}: duplicate key {key!r} (first at line {first[key]}); "
                                   "YAML would silently keep only the last one: remove or rename one of them"))
                continue
            first[key] = line
            lines[loc + (key,)] = line
            _index(v, loc + (key,), lines, path, seen_nodes, dups)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[loc + (i,)] = item.start_mark.line + 1
            _index(item, loc + (i,), lines, path, seen_nodes, dups)


def load_yaml(text: str, path: Path, duplicates: list[tuple[int, str]] | None = None) -> tuple[Any, dict[Loc, int]]:
    """Parse YAML text; returns (data, {key path: line number}). Syntax errors raise ConfigError as
    `file:line: message`; so do duplicate keys, unless a `duplicates` list is given to collect them."""
    dups: list[tuple[int, str]] = [] if duplicates is None else duplicates
    loader = _LineLoader(text)
    try:
        node = loader.get_single_node()
        lines: dict[Loc, int] = {}
        if node is None:
            return None, lines
        lines[()] = node.start_mark.line + 1
        _index(node, (), lines, path, set(), dups)
        if dups and duplicates is None:
            raise ConfigError(dups[0][1], problems=[m for _, m in dups])
        return loader.construct_document(node), lines
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}{where}: not valid YAML: {problem}") from None
    finally:
        loader.dispose()


# ---- "did you mean" -------------------------------------------------------------------------------------------------
def did_you_mean(name: Any, known: Iterable[str]) -> str:
    """`; did you mean 'x'?` for the closest known name, else the list of known names."""
    known = sorted({str(k) for k in known})
    close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; known: {', '.join(known)}" if known and len(known) <= 25 else ""


# ---- the structure --------------------------------------------------------------------------------------------------
class _Strict(BaseModel):
    """A mapping whose keys are all known: an unknown one is an error naming the closest known key."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _members(tp: Any) -> list[Any]:
    """The alternatives of a (possibly Optional/Union) annotation."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        return [m for a in typing.get_args(tp) for m in _members(a)]
    return [tp]


def _known_at(root: type[BaseModel], loc: Loc) -> set[str]:
    """Field names of the model that sits at `loc` under `root` (for "did you mean")."""
    current: list[Any] = [root]
    for part in loc:
        nxt: list[Any] = []
        for tp in (m for c in current for m in _members(c)):
            origin = typing.get_origin(tp)
            if isinstance(tp, type) and issubclass(tp, BaseModel) and isinstance(part, str) and part in tp.model_fields:
                nxt.append(tp.model_fields[part].annotation)
            elif origin is dict:
                nxt.append(typing.get_args(tp)[1])
            elif origin is list and isinstance(part, int):
                nxt.append(typing.get_args(tp)[0])
        current = nxt
    names: set[str] = set()
    for tp in (m for c in current for m in _members(c)):
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            names |= set(tp.model_fields)
    return names


NonNeg = Field(default=None, ge=0)


class ToolsSpec(_Strict):
    """`tools:` of a benchmark or split (docs/interfaces.md); read by evalpipe/tools."""

    fixtures: Any = None
    allowlist: Any = None
    schemas: Any = None
    live: Union[Literal[False], list[Any], None] = None  # `module:function` names or {function, name, ...} mappings
    python: Optional[bool] = None
    bash: Optional[bool] = None
    mode: Optional[Literal["replay", "live"]] = None


class SplitOptions(_Strict):
    """Options of a benchmark (its `options:`) or a split's overrides. Adapter-specific keys are free-form unless
    the adapter declares `option_schema`; these are typed for every adapter."""

    model_config = ConfigDict(extra="allow")
    limit: Optional[int] = Field(default=None, ge=0)
    slice_by: Optional[list[str]] = None
    shuffle: Optional[bool] = None
    seed: Optional[int] = None
    tools: Optional[ToolsSpec] = None
    prompt_wrapper: Any = None
    max_turns: Optional[int] = Field(default=None, ge=1)
    max_tool_calls: Optional[int] = Field(default=None, ge=0)
    # [epochs] each sample N times, scores reduced per sample (docs/metrics.md "Epochs"); sample_ids: the split is these
    epochs: Optional[int] = Field(default=None, ge=1)
    epochs_reducer: Optional[str] = Field(default=None,
                                          pattern=r"^(mean|median|max|at_least_[1-9][0-9]*|pass_at_[1-9][0-9]*)$")
    sample_ids: Optional[list[str]] = None
    # [routing] each sample judged by its source's metrics (evalpipe/benchmarks/routing.py, docs/metrics.md)
    metrics_by_source: Optional[dict[str, list[Union[str, dict[str, Any]]]]] = None
    route_by: Optional[str] = Field(default=None, min_length=1)
    # a function computing the split's extra metrics rows from its judgements (Adapter.calculate_metrics)
    calculate_metrics: Optional[str] = Field(default=None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


MetricSpec = Union[str, dict[str, Any]]


class SplitEntry(SplitOptions):
    """One entry under a benchmark's `splits:` mapping: options for that split, plus its own metrics/template."""

    metrics: Optional[list[MetricSpec]] = None
    prompt_template: Optional[str] = None
    description: Optional[str] = None


class Benchmark(_Strict):
    adapter: str
    splits: Union[list[str], dict[str, Optional[SplitEntry]], None] = None
    options: Optional[SplitOptions] = None
    metrics: Optional[list[MetricSpec]] = None
    prompt_template: Optional[str] = None
    description: Optional[str] = None
    tools: Optional[ToolsSpec] = None
    prompt_wrapper: Any = None
    # the models meant to run this benchmark (a run without --model; the leaderboard's intended pairs)
    models: Union[list[str], str, None] = None


class ModelEntry(_Strict):
    """A model (or a judge). Keys not listed here are runner options (`reply: target` for echo)."""

    model_config = ConfigDict(extra="allow")
    runner: str = "echo"
    model: Optional[str] = None
    api_base: Optional[str] = None
    api_key_env: Optional[str] = None
    params: Optional[dict[str, Any]] = None
    options: Optional[dict[str, Any]] = None
    description: Optional[str] = None
    experiment: Optional[str] = None
    prompt_wrapper: Any = None


class RunOptions(BaseModel):
    """Run settings a model's options may carry (evalpipe/runners/driver.py `SETTING_KEYS`)."""

    model_config = ConfigDict(extra="allow")
    concurrency: Optional[int] = Field(default=None, ge=1)
    timeout_s: Optional[float] = Field(default=None, gt=0)
    max_retries: Optional[int] = Field(default=None, ge=0)
    backoff_base_s: Optional[float] = Field(default=None, ge=0)
    backoff_max_s: Optional[float] = Field(default=None, ge=0)
    fail_fast: Optional[bool] = None
    rpm: Optional[float] = Field(default=None, gt=0)
    tpm: Optional[float] = Field(default=None, gt=0)


class Checks(_Strict):
    max_error_rate: Optional[float] = Field(default=None, ge=0, le=1)
    max_parse_error_rate: Optional[float] = Field(default=None, ge=0, le=1)
    severity: Optional[Literal["error", "warn", "ERROR", "WARN"]] = None


class Checkpoints(_Strict):
    dir: Optional[str] = None
    registry_file: Optional[str] = None
    runner: Optional[str] = None
    params: Optional[dict[str, Any]] = None
    options: Optional[dict[str, Any]] = None
    benchmarks: Union[list[str], str, None] = None
    key_prefix: Optional[str] = None
    api_base: Optional[str] = None
    api_key_env: Optional[str] = None


class Artifacts(_Strict):
    dir: Optional[str] = None
    enabled: Optional[bool] = None
    writer: Optional[str] = None  # local (default) | memory | package.module:attribute (store/artifacts.py ArtifactWriter)
    folder_name: Optional[Literal["run_id", "timestamp_run_id"]] = None  # run folders: <run_id> or <UTC start>_<run_id>


class Tracing(_Strict):
    exporter: Optional[Literal["jsonl", "otlp", "azure_monitor", "none"]] = None
    path: Optional[str] = None
    endpoint: Optional[str] = None
    connection_string_env: Optional[str] = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")  # a NAME, not the secret


class Pii(_Strict):
    """`pii:` opt-in PII masking on every write path (docs/config.md "PII masking")."""
    entities: list[Literal[PII_ENTITIES]] = Field(min_length=1)  # type: ignore[valid-type]
    locale: Optional[str] = Field(default=None, pattern=r"^[a-z]{2}_[A-Z]{2}$")  # phone numbers without +country
    enabled: Optional[bool] = None


class Mlflow(_Strict):
    """`mlflow:` opt-in: each metrics partition logged as an MLflow run (docs/interop.md "MLflow")."""
    tracking_uri: Optional[str] = None
    experiment: Optional[str] = Field(default=None, min_length=1)
    include_tries: Optional[bool] = None
    enabled: Optional[bool] = None

    @model_validator(mode="after")
    def _installed(self) -> "Mlflow":
        # refused at load, before any model call, rather than failing after the run's metrics are computed
        import importlib.util

        if self.enabled is not False and importlib.util.find_spec("mlflow") is None:
            raise ValueError("MLflow is not installed: pip install 'evalpipe[interop]', or remove `mlflow:`")
        return self


class Reviews(_Strict):
    """`reviews:` people's reviews in the web viewer (docs/viewer.md "Reviews")."""
    rubric: Optional[dict[str, Union[list[Union[int, str]], int]]] = None  # criterion: [scores] or N (1..N)
    identity_header: Optional[str] = Field(default=None, pattern=r"^[A-Za-z0-9-]{1,64}$")  # set by an auth proxy
    reviewers_per_item: Optional[int] = Field(default=None, ge=1)
    reserve_minutes: Optional[float] = Field(default=None, gt=0)
    bootstrap: Optional[int] = Field(default=None, ge=0)  # Bradley-Terry resamples on the ranking page


class Pairwise(_Strict):
    """`pairwise:` a judge model's preferences between models' answers (docs/viewer.md "Pairwise judging")."""
    split: Optional[str] = Field(default=None, min_length=1)
    models: Optional[list[str]] = Field(default=None, min_length=2)
    judge: Union[str, dict[str, Any], None] = None  # a name under judges: or an inline judge
    limit: Optional[int] = Field(default=None, ge=1)  # the first N samples both models answered, per pair
    prompt: Optional[str] = Field(default=None, min_length=1)  # {input} {target} {answer_1} {answer_2}


class TopLevel(_Strict):
    benchmarks: Optional[dict[str, Benchmark]] = None
    models: Optional[dict[str, ModelEntry]] = None
    default_models: Union[list[str], str, None] = None
    default_benchmarks: Union[list[str], str, None] = None
    judges: Optional[dict[str, ModelEntry]] = None
    settings: Optional[dict[str, Any]] = None
    checks: Optional[Checks] = None
    checkpoints: Optional[Checkpoints] = None
    artifacts: Optional[Artifacts] = None
    tracing: Optional[Tracing] = None
    redact_patterns: Union[list[str], str, None] = None
    pii: Optional[Pii] = None
    mlflow: Optional[Mlflow] = None
    # added this round (docs/interfaces.md)
    sandbox: Optional[Literal["auto", "bwrap", "docker", "process"]] = None
    sandbox_disk_mb: Optional[int] = Field(default=None, ge=0)  # [sandbox] work folder quota (docs/sandbox.md)
    plugins: Optional[list[str]] = None
    max_concurrent_partitions: Optional[int] = Field(default=None, ge=1)
    sweep_batch_partitions: Optional[int] = Field(default=None, ge=1)  # [sweeps] partitions per Dagster run
    sweep_processes: Optional[int] = Field(default=None, ge=1)  # [sweeps] worker processes of `evalpipe run`
    stream_batch_rows: Optional[int] = Field(default=None, ge=1)  # [scale] rows per batch (docs/scale.md)
    warehouse: Optional[dict[str, Any]] = None
    rate_limits: Optional[dict[str, Any]] = None
    budget: Optional[dict[str, Any]] = None  # [spend] caps on tokens/cost per run, tick, day (docs/spend.md)
    reviews: Optional[Reviews] = None
    pairwise: Optional[Pairwise] = None


# ---- reporting ------------------------------------------------------------------------------------------------------
def _where(loc: Loc) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


class _Report:
    def __init__(self, path: Path, lines: dict[Loc, int]):
        self.path, self.lines, self.issues = path, lines, []

    def line(self, loc: Loc) -> int | None:
        loc = tuple(loc)
        while loc:
            if loc in self.lines:
                return self.lines[loc]
            loc = loc[:-1]
        return self.lines.get(())

    def add(self, loc: Loc, message: str, line_loc: Loc | None = None) -> None:
        line = self.line(loc if line_loc is None else line_loc)
        self.issues.append((line or 0, f"{self.path}{f':{line}' if line else ''}: {_where(loc)}: {message}"))

    def add_pydantic(self, exc: ValidationError, root: Any = None, prefix: Loc = (), remap: Any = None) -> None:
        errors = exc.errors(include_url=False)
        # A union (`splits`: a list or a mapping) reports a failure per alternative: keep the errors of the
        # alternative that fits the value's shape, i.e. drop "should be a valid list" when another one went deeper.
        def union_prefix(e: dict) -> Loc | None:
            for i, p in enumerate(e["loc"]):
                if _is_union_tag(p):
                    return tuple(e["loc"][:i])
            return None

        deep = {union_prefix(e) for e in errors if e["type"] not in _SHAPE_ERRORS and union_prefix(e) is not None}
        shown: set[Loc] = set()
        kept = []
        for e in errors:
            up = union_prefix(e)
            if up is not None and e["type"] in _SHAPE_ERRORS:
                if up in deep or up in shown:
                    continue
                shown.add(up)
                e = {**e, "msg": "expected " + _SHAPE_HINT.get(e["type"], "another type") + " (see docs/config.md)"}
            kept.append(e)
        for err in kept:
            loc = tuple(p for p in err["loc"] if not _is_union_tag(p))
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown key" + did_you_mean(loc[-1], _known_at(root, loc[:-1]))
            elif err["type"] == "missing":
                msg = ("needs an 'adapter' (see `evalpipe adapters`)" if loc[-1] == "adapter" else f"needs {loc[-1]!r}")
                loc = loc[:-1]
            elif err["type"] in _TYPE_WORDS:
                msg = f"must be {_TYPE_WORDS[err['type']]}"
            value = err.get("input")
            if err["type"] not in ("extra_forbidden", "missing") and isinstance(value, (str, int, float)) \
                    and not isinstance(value, bool) and len(str(value)) <= 40 and not _secretish(loc):
                msg += f" (got {value!r})"
            loc = prefix + loc
            if remap is not None:
                loc = remap(loc)
            self.add(loc, msg[0].lower() + msg[1:] if msg else msg)

    def raise_if_any(self) -> None:
        if not self.issues:
            return
        self.issues.sort(key=lambda t: t[0])
        first = self.issues[0][1]
        more = len(self.issues) - 1
        raise ConfigError(first + (f" (and {more} more problem{'s' if more > 1 else ''}; run `evalpipe validate` "
                                   "to see all)" if more else ""), problems=[m for _, m in self.issues])


_SHAPE_ERRORS = {"list_type", "dict_type", "string_type", "model_type", "model_attributes_type", "int_type",
                 "bool_type", "float_type", "none_required"}
_TYPE_WORDS = {"dict_type": "a mapping", "list_type": "a list", "string_type": "a string", "bool_type": "true or false",
               "bool_parsing": "true or false", "int_type": "an integer", "int_parsing": "an integer",
               "int_from_float": "a whole number", "float_type": "a number", "float_parsing": "a number",
               "model_type": "a mapping", "model_attributes_type": "a mapping"}
_SHAPE_HINT = {"list_type": "a list or a mapping", "dict_type": "a mapping or a list", "string_type": "a name or a list",
               "none_required": "a value of another type"}


def _secretish(loc: Loc) -> bool:
    from evalpipe.core.redact import is_secret_name

    return any(isinstance(p, str) and is_secret_name(p) for p in loc)


def _is_union_tag(part: Any) -> bool:
    # pydantic puts the union member tried into the loc ("list[str]", "dict[str,...]", "str"): not a config key
    return isinstance(part, str) and ("[" in part or part in ("str", "int", "float", "bool", "none", "function-after"))


def _option_schema(factory: Any) -> Any:
    return getattr(factory, "option_schema", None)


def declared_names(schema: Any) -> set[str] | None:
    """The option names a declared `option_schema` accepts (None: nothing declared, options are free-form)."""
    if schema is None:
        return None
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return {f.alias or n for n, f in schema.model_fields.items()} | set(schema.model_fields)
    return {str(n) for n in schema}


def option_problems(schema: Any, options: dict[str, Any], what: str,
                    extra_known: Iterable[str] = ()) -> list[tuple[tuple, str]]:
    """(path into the options, problem) for each unknown option or bad value under a declared `option_schema`
    (a pydantic model class or a set of names); [] when nothing is declared."""
    known = declared_names(schema)
    if known is None:
        return []
    known |= set(extra_known)
    # an unknown option is named inside the message, not as the last part of the path: `api_key: unknown ...`
    # would read as a secret pair to the redactor, which masks the message itself
    out: list[tuple[tuple, str]] = [((), f"unknown option {str(k)!r} for {what}{did_you_mean(k, known)}")
                                    for k in options if k not in known]
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        own = declared_names(schema) or set()
        try:
            schema.model_validate({k: v for k, v in options.items() if k in own})
        except ValidationError as exc:
            for err in exc.errors(include_url=False):
                parts = tuple(p for p in err["loc"] if not _is_union_tag(p))
                msg = _TYPE_WORDS.get(err["type"])
                msg = f"must be {msg}" if msg else err["msg"][0].lower() + err["msg"][1:]
                value = err.get("input")
                if isinstance(value, (str, int, float)) and not isinstance(value, bool) and len(str(value)) <= 40:
                    msg += f" (got {value!r})"
                out.append((parts, msg))
    return out


def _check_declared(report: _Report, schema: Any, options: dict[str, Any], loc_of: Any, what: str,
                    extra_known: Iterable[str] = ()) -> None:
    """Options against a declared `option_schema` (a pydantic model class or a set of names)."""
    known = declared_names(schema)
    unknown = [k for k in options if known is not None and k not in known | set(extra_known)]
    for parts, msg in option_problems(schema, options, what, extra_known):
        if not parts and unknown:  # the line of the unknown option itself, the path of its mapping
            report.add(loc_of(None), msg, line_loc=loc_of(unknown.pop(0)))
        else:
            report.add((loc_of(parts[0]) + tuple(parts[1:])) if parts else loc_of(None), msg)


# ---- the whole config -------------------------------------------------------------------------------------------------
MODEL_KEYS = set(ModelEntry.model_fields)
# Options every model takes whatever its runner: the driver's run settings, the experiment key, the prompt wrapper and
# rollout sharding (evalpipe/pipeline/stages.py). A runner's own options are in its `option_schema`.
COMMON_MODEL_OPTIONS = set(RunOptions.model_fields) | {"experiment", "prompt_wrapper", "rollout_shards"}
# Options every split takes whatever its adapter, because the pipeline or the tool layer applies them: limit and
# shards (dataset), slices, the prompt wrapper, the tool loop (evalpipe/tools/env.py) and the header check.
# `shuffle`, `seed` and `protocol` are not here: only the adapters that apply them declare them.
COMMON_SPLIT_OPTIONS = {"limit", "slice_by", "tools", "prompt_wrapper", "max_turns", "max_tool_calls", "tool_timeout_s",
                        "tool_output_cap", "sandbox", "rollout_shards", "fail_on_fingerprint_mismatch", "num_shards",
                        "shard_index", "epochs", "epochs_reducer", "sample_ids", "metrics_by_source", "route_by",
                        "calculate_metrics"}
# Split options a single run may override (`--benchmark-option`, `evaluate(benchmark_options=...)`, the launchpad's
# `eval_config.split_options`): the ones read only after the dataset stage (prompts, rollouts, judging) or kept apart
# (shards write their own warehouse). Any other option shapes the `dataset` partition, which is keyed by split alone
# and read by every model key of the split: overridden for one run, it would silently change what every later
# evaluation of the split sees (the --limit bug of issue 20), so it is refused; a split of its own in the config
# file holds it instead. `limit` is a try (`<model>@limit<N>`, evalpipe/core/run_marks.py). `slice_by` does rewrite the
# partition, but only adds breakdown slices: the samples, and every `all` number, stay the same.
RUN_TIME_SPLIT_OPTIONS = frozenset({"slice_by", "prompt_wrapper", "max_turns", "max_tool_calls", "tool_timeout_s", "tool_output_cap",
                                    "sandbox", "rollout_shards", "fail_on_fingerprint_mismatch", "num_shards",
                                    "shard_index", "min_eligible_for_gates", "code_timeout_s", "epochs", "epochs_reducer"})


def dataset_shaping(split_options: dict[str, Any]) -> list[str]:
    """The run-time split options that would rewrite the shared `dataset` partition (everything but `limit` and
    RUN_TIME_SPLIT_OPTIONS)."""
    return [k for k in split_options if k != "limit" and k not in RUN_TIME_SPLIT_OPTIONS]


def dataset_shaping_error(key: str, value: Any, split_key: str, flag: str) -> str:
    base, _, name = split_key.partition("/")
    return (f"{flag} {key}={value!r}: this option decides what split {split_key} holds, and its dataset partition is "
            f"shared by every model evaluated on it, so one run may not change it; declare a split with it in the "
            f"config file (benchmarks.{base}.splits.{name}_{key}: {{{key}: ...}}), or try a few samples with --limit N")


JUDGE_FIX = ("add one under 'judges:' (the first one is used) or set 'judge:' in the metric's settings "
             "(docs/metrics.md#model-graded-verdicts)")


def _load_plugins(report: _Report, data: dict[str, Any], path: Path) -> None:
    for i, name in enumerate(data.get("plugins") or []):
        try:
            import_module(str(name), path)
        except Exception as exc:  # a plugin that can't be imported is a config mistake
            report.add(("plugins", i), f"cannot import plugin module {name!r}: {type(exc).__name__}: "
                                       f"{str(exc).splitlines()[0] if str(exc) else ''}")


def _check_model(report: _Report, section: str, name: str, raw: dict[str, Any], runners: dict[str, Any],
                 notes: list[str] | None = None) -> None:
    runner = str(raw.get("runner", "echo"))
    if runner not in runners:
        report.add((section, name, "runner"), f"unknown runner {runner!r}{did_you_mean(runner, runners)} "
                                              f"(`evalpipe runners` lists them){nothing_registered_hint('runner')}")
        factory = None
    else:
        factory = runners[runner]
    inline = {k: v for k, v in raw.items() if k not in MODEL_KEYS}
    nested = dict(raw.get("options") or {})

    def loc_of(k: Any) -> Loc:
        if k is None:
            return (section, name)
        return (section, name, "options", k) if k in nested else (section, name, k)

    merged = {**inline, **nested}
    schema = _option_schema(factory) if factory is not None else None
    declared = set(schema.model_fields) if isinstance(schema, type) and issubclass(schema, BaseModel) else set(schema or ())
    for k in inline:  # `rnner:` is not an option but a typo: say so even when the runner declares nothing
        close = difflib.get_close_matches(str(k), sorted(MODEL_KEYS), n=1, cutoff=0.8)
        # (`mode` is an option some runner may read, not a short `model`: a prefix is not a typo)
        if close and k not in declared and k not in COMMON_MODEL_OPTIONS and not close[0].startswith(str(k)) \
                and not str(k).startswith(close[0]):
            report.add((section, name, k), f"unknown key; did you mean {close[0]!r}?")
    try:
        RunOptions.model_validate(merged)
    except ValidationError as exc:
        report.add_pydantic(exc, RunOptions, remap=lambda loc: loc_of(loc[0]) + tuple(loc[1:]) if loc else loc_of(None))
    if factory is not None:
        _check_declared(report, schema, merged, loc_of, f"runner {runner!r}", COMMON_MODEL_OPTIONS)
        if schema is None and notes is not None and set(merged) - COMMON_MODEL_OPTIONS:
            notes.append(undeclared_note("runner", runner))
        # a runner's own "can't run here" checks (e.g. `engine: vllm` without vllm installed), before any model call
        for key, problem in getattr(factory, "config_problems", lambda _options: [])(merged):
            report.add(loc_of(key), problem)


def _check_metrics(report: _Report, loc: Loc, specs: Any, metrics: list[str], judges: Iterable[str] = (),
                   notes: list[str] | None = None) -> None:
    from evalpipe.metrics import get_metric
    from evalpipe.metrics.settings import setting_problems

    judges = {str(j) for j in judges}
    first: dict[str, int] = {}
    for i, spec in enumerate(specs or []):
        name = spec if isinstance(spec, str) else (spec.get("name") if isinstance(spec, dict) else None)
        if name is None:
            report.add(loc + (i,), "a metric is a name or a mapping with 'name' (e.g. {name: exact_match})")
        elif str(name) in first:  # judgements and metrics rows are keyed by the metric's name: two would mix
            report.add(loc + (i,), f"metric {name!r} is listed twice (entries {first[str(name)]} and {i}); its "
                                   "judgements and scores are keyed by name, so the two would be mixed into one "
                                   "row: keep one entry per metric")
        elif str(name) not in metrics:
            at = loc + (i,) if isinstance(spec, str) else loc + (i, "name")
            report.add(at, f"unknown metric {name!r}{did_you_mean(name, metrics)} (`evalpipe metrics` lists them)"
                           f"{nothing_registered_hint('metric')}")
        if name is not None:
            first.setdefault(str(name), i)
        factory = get_metric(str(name)) if name is not None and str(name) in metrics else None
        if factory is not None and getattr(factory, "needs_judge", False) and not judges and not (
                isinstance(spec, dict) and (spec.get("judge") is not None or spec.get("judges") is not None)):
            report.add(loc + (i,), f"metric {name!r} needs a judge model: {JUDGE_FIX}")
        if not isinstance(spec, dict):
            continue
        if factory is not None:  # its settings, against what it declares: names here, types and ranges below
            settings = {k: v for k, v in spec.items() if k != "name"}
            schema = _option_schema(factory)
            _check_declared(report, declared_names(schema), settings,
                            lambda k, i=i: loc + (i,) + ((k,) if k else ()), f"metric {name!r}")
            for key, problem in setting_problems(str(name), schema, settings):
                report.add(loc + (i, key), problem)
            if _option_schema(factory) is None and settings and notes is not None:
                notes.append(undeclared_note("metric", str(name)))
        # judges named by a model-graded metric must be under `judges:` (inline mappings are judges themselves)
        for key in ("judge", "judges"):
            named = spec.get(key)
            items = [named] if isinstance(named, str) else (named if isinstance(named, list) else [])
            for j, item in enumerate(items):
                if isinstance(item, str) and item not in judges:
                    at = loc + (i, key) if isinstance(named, str) else loc + (i, key, j)
                    report.add(at, f"unknown judge {item!r}{did_you_mean(item, judges) if judges else ''}; "
                                   "add it under 'judges:'")


def _check_routes(report: _Report, loc: Loc, options: dict[str, Any], metrics: list[str], judges: Iterable[str],
                  notes: list[str] | None, shared: Any = None, names_only: bool = False) -> None:
    """`metrics_by_source:` (evalpipe/benchmarks/routing.py): each source's metrics as a `metrics:` list, and none
    also in `shared` (the `metrics:` judging every sample: a metric can't judge all samples and some only)."""
    from evalpipe.benchmarks.routing import spec_name

    routes = options.get("metrics_by_source")
    if not isinstance(routes, dict):
        return
    every = {spec_name(m) for m in shared} if isinstance(shared, list) else set()
    for source, specs in routes.items():
        for i, spec in enumerate(specs if isinstance(specs, list) else []):
            if spec_name(spec) in every:
                report.add(loc + ("metrics_by_source", source, i),
                           f"metric {spec_name(spec)!r} is also under `metrics:`, which judges every sample; keep it "
                           "in one of the two")
    if names_only:
        return
    if not routes:
        report.add(loc + ("metrics_by_source",), "metrics_by_source is empty: name at least one source and its "
                                                 "metrics (e.g. {gaia: [gaia]}), or remove it")
    for source, specs in routes.items():
        if isinstance(specs, list):
            _check_metrics(report, loc + ("metrics_by_source", source), specs, metrics, judges, notes)


def undeclared_note(kind: str, name: str) -> str:
    return (f"{kind} {name!r} declares no option_schema: its options are passed on unchecked (a plugin may declare "
            "them, docs/config.md#declaring-options)")


def _default_judges(report: _Report, loc: Loc, adapter: Any, factory: Any, judges: list[str]) -> None:
    """An adapter's default metrics (no `metrics:` given) that need a judge, when `judges:` has none."""
    from evalpipe.metrics import get_metric, list_metrics

    if judges:
        return
    known = set(list_metrics())
    for spec in getattr(factory, "default_metrics", None) or []:
        name = spec if isinstance(spec, str) else spec.get("name") if isinstance(spec, dict) else None
        if name in known and getattr(get_metric(name), "needs_judge", False) and not (
                isinstance(spec, dict) and (spec.get("judge") is not None or spec.get("judges") is not None)):
            report.add(loc, f"metric {name!r} needs a judge model (a default metric of adapter {adapter!r}): {JUDGE_FIX}")


def validate_config(data: Any, path: Path, lines: dict[Loc, int] | None = None,
                    duplicates: list[tuple[int, str]] | None = None, notes: list[str] | None = None) -> None:
    """Check the whole config; raise ConfigError (`file:line: message`, every problem in `.problems`). `notes`
    collects what is accepted unchecked (a plugin that declares no options)."""
    report = _Report(Path(path), lines or {})
    report.issues += list(duplicates or [])
    if data is None:
        data = {}
    if not isinstance(data, dict):
        report.add((), "the config must be a mapping with 'benchmarks' and 'models'")
        report.raise_if_any()
    try:
        TopLevel.model_validate(data)
    except ValidationError as exc:
        report.add_pydantic(exc, TopLevel)
    _load_plugins(report, data, Path(path))

    from evalpipe.benchmarks import get_adapter, list_adapters
    from evalpipe.metrics import list_metrics
    from evalpipe.runners import get_runner, list_runners

    runners = {n: get_runner(n) for n in list_runners()}
    adapters = {n: get_adapter(n) for n in list_adapters()}
    metrics = list_metrics()

    benchmarks = data.get("benchmarks") if isinstance(data.get("benchmarks"), dict) else {}
    judge_names = list(data.get("judges") or {}) if isinstance(data.get("judges"), dict) else []
    for bname, b in benchmarks.items():
        if not isinstance(b, dict):
            continue
        adapter = b.get("adapter")
        if isinstance(adapter, str) and adapter not in adapters:
            report.add(("benchmarks", bname, "adapter"),
                       f"unknown adapter {adapter!r}{did_you_mean(adapter, adapters)} (`evalpipe adapters` lists them)"
                       f"{nothing_registered_hint('adapter')}")
        if isinstance(b.get("metrics"), list):
            _check_metrics(report, ("benchmarks", bname, "metrics"), b["metrics"], metrics, judge_names, notes)
        factory = adapters.get(adapter) if isinstance(adapter, str) else None
        schema = _option_schema(factory)
        opts = b.get("options") if isinstance(b.get("options"), dict) else {}
        _check_routes(report, ("benchmarks", bname, "options"), opts, metrics, judge_names, notes, b.get("metrics"))
        _check_declared(report, schema, opts, lambda k, bn=bname: ("benchmarks", bn, "options") + ((k,) if k else ()),
                        f"adapter {adapter!r}", COMMON_SPLIT_OPTIONS)
        splits = b.get("splits")
        split_entries = splits if isinstance(splits, dict) else {}
        # a split without its own `metrics:` gets the benchmark's, else the adapter's defaults
        takes_defaults = b.get("metrics") is None and (not split_entries or any(
            not isinstance(s, dict) or s.get("metrics") is None for s in split_entries.values()))
        if factory is not None and takes_defaults:
            _default_judges(report, ("benchmarks", bname), adapter, factory, judge_names)
        if factory is not None and schema is None and notes is not None:
            notes.append(undeclared_note("adapter", str(adapter)))
        if isinstance(splits, dict):
            for sname, s in splits.items():
                if not isinstance(s, dict):
                    continue
                if isinstance(s.get("metrics"), list):
                    _check_metrics(report, ("benchmarks", bname, "splits", sname, "metrics"), s["metrics"], metrics,
                                   judge_names, notes)
                _check_routes(report, ("benchmarks", bname, "splits", sname), s, metrics, judge_names, notes,
                              s.get("metrics", b.get("metrics")))
                if "metrics" in s and "metrics_by_source" not in s:  # the split's own list beside the benchmark's routes
                    _check_routes(report, ("benchmarks", bname, "options"), {"metrics_by_source": opts.get(
                        "metrics_by_source")}, metrics, [], None, s.get("metrics"), names_only=True)
                own = {k: v for k, v in s.items() if k not in ("metrics", "prompt_template", "description")}
                _check_declared(report, schema, own,
                                lambda k, bn=bname, sn=sname: ("benchmarks", bn, "splits", sn) + ((k,) if k else ()),
                                f"adapter {adapter!r}", COMMON_SPLIT_OPTIONS)
    for section in ("models", "judges"):
        entries = data.get(section) if isinstance(data.get(section), dict) else {}
        for name, raw in entries.items():
            if section == "models" and is_limited(str(name)):  # what tries.refuse_try_key says for the sensor
                report.add((section, name), f"model key {name!r} reads as a try (<model>@limit<N>, @ids-<h> or "
                                            f"@subset-<h>): it would be evaluated on part of its splits and never "
                                            f"ranked; rename it without '@'")
            if isinstance(raw, dict):
                _check_model(report, section, str(name), raw, runners, notes)
            elif raw is not None:
                report.add((section, name), f"expected a mapping with at least 'runner', got {type(raw).__name__}")
    models = data.get("models") if isinstance(data.get("models"), dict) else {}
    for key, pool, what in (("default_models", models, "model"), ("default_benchmarks", benchmarks, "benchmark")):
        wanted = data.get(key)
        for i, w in enumerate([wanted] if isinstance(wanted, str) else (wanted or [])):
            if str(w) not in {str(p) for p in pool}:
                loc = (key,) if isinstance(wanted, str) else (key, i)
                report.add(loc, f"default {what} {w!r} is not under '{what}s'{did_you_mean(w, pool)}")
    backend = data.get("sandbox")
    if backend in ("bwrap", "docker"):  # named explicitly: it must run here, or the judging fails after the model calls
        from evalpipe.sandbox import get_sandbox

        why = get_sandbox(backend).probe()
        if why:
            report.add(("sandbox",), f"sandbox backend {backend!r} cannot run here: {why}; or set `sandbox: auto`")
    limits = (data.get("rate_limits") or {}).get("limits") if isinstance(data.get("rate_limits"), dict) else None
    if isinstance(limits, dict):  # rpm, tpm, max_in_flight: a limit that can't be honoured fails here, before any call
        from evalpipe.store.ratelimit import check_limit

        for key, raw in limits.items():
            why = check_limit(str(key), raw)
            if why:
                report.add(("rate_limits", "limits", key), why)
    if data.get("budget") is not None:  # [spend] a cap that can't be honoured fails here, before any call
        from evalpipe.store.ratelimit import check_budget

        for where, why in check_budget(data.get("budget")):
            report.add(("budget", *where), why)
    cp = data.get("checkpoints")
    if isinstance(cp, dict) and cp.get("runner") and str(cp["runner"]) not in runners:
        report.add(("checkpoints", "runner"), f"unknown runner {cp['runner']!r}{did_you_mean(cp['runner'], runners)}")
    report.raise_if_any()


def validate_file(path: str | Path) -> dict[str, Any]:
    """Load and validate a config file; returns its data (ConfigError on any problem)."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file {p} not found; create it or point EVALS_CONFIG at one")
    dups: list[tuple[int, str]] = []
    data, lines = load_yaml(read_config_text(p), p, dups)
    validate_config(data, p, lines, dups)
    return data or {}


def check_overrides(options: dict[str, Any], flag: str) -> None:
    """Options given on the command line (`--benchmark-option k=v`): the same types and ranges as in the file."""
    try:
        SplitOptions.model_validate(options)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"] if not _is_union_tag(p))
        msg = _TYPE_WORDS.get(err["type"])
        msg = f"must be {msg}" if msg else err["msg"][0].lower() + err["msg"][1:]
        raise ConfigError(f"{flag} {where}={err.get('input')!r}: {msg}") from None


def check_run_options(cfg: Any, split_keys: Iterable[str], model_keys: Iterable[str], split_options: dict[str, Any],
                      runner_options: dict[str, Any], split_flag: str = "--benchmark-option",
                      runner_flag: str = "--runner-option") -> None:
    """Options given for one run (`--benchmark-option`, `--runner-option`, `evaluate(benchmark_options=...,
    runner_options=...)`) against what each chosen split's adapter and each chosen model's runner declares: an
    option one of them does not take is a ConfigError naming it, before any model call. `runner_options` holds the
    runner options only (not the `model_runner` resource fields, not `params.*`)."""
    from evalpipe.benchmarks import get_adapter
    from evalpipe.runners import get_runner

    for key in split_keys:
        split = cfg.split(key)
        for parts, msg in option_problems(_option_schema(get_adapter(split.adapter)), split_options,
                                          f"adapter {split.adapter!r} (split {key})", COMMON_SPLIT_OPTIONS):
            raise ConfigError(f"{split_flag}{' ' if parts else ''}{'.'.join(map(str, parts))}: {msg}")
        for k in dataset_shaping(split_options):
            raise ConfigError(dataset_shaping_error(k, split_options[k], key, split_flag))
    if not runner_options:
        return
    for key in model_keys:
        try:
            model = cfg.model(key)
        except ConfigError:  # a model string not in the config (`--model openai/x`): litellm's
            model = None
        runner = model.runner if model is not None else "litellm"
        factory = get_runner(runner)
        for parts, msg in option_problems(_option_schema(factory), runner_options,
                                          f"runner {runner!r} (model {key})", COMMON_MODEL_OPTIONS):
            raise ConfigError(f"{runner_flag}{' ' if parts else ''}{'.'.join(map(str, parts))}: {msg}")
        merged = {**(model.options if model is not None else {}), **runner_options}
        for k, problem in getattr(factory, "config_problems", lambda _o: [])(merged):
            if k in runner_options:
                raise ConfigError(f"{runner_flag} {k}: {problem}")


def split_metric_specs(cfg: Any, key: str) -> list[Any]:
    """Every metric entry that judges split `key`: its `metrics:` (else its adapter's defaults) and its
    `metrics_by_source` routes."""
    from evalpipe.benchmarks import get_adapter

    split = cfg.split(key)
    specs = list(split.metrics if split.metrics is not None else
                 getattr(get_adapter(split.adapter), "default_metrics", None) or [])
    routes = (split.options or {}).get("metrics_by_source")
    for routed in (routes.values() if isinstance(routes, dict) else []):
        specs += list(routed or [])
    return specs


def judge_key_problems(cfg: Any, split_keys: Iterable[str], environ: Any = None) -> list[str]:
    """One line per judge that a chosen split's model-graded metric would call without its credentials: the
    environment variable its entry names (`api_key_env`) unset. Judges are resolved as the metric resolves them
    (`judge:`/`judges:` of its entry, else the first under `judges:`). Checked by `evalpipe validate` and before a
    run's first rollout: otherwise every rollout would be paid for and then every verdict would fail."""
    import os

    from evalpipe.metrics import get_metric, list_metrics
    from evalpipe.metrics.judge_client import judges_from_settings

    env = os.environ if environ is None else environ
    known, out = set(list_metrics()), []
    for key in split_keys:
        for spec in split_metric_specs(cfg, key):
            name = spec if isinstance(spec, str) else spec.get("name") if isinstance(spec, dict) else None
            if name not in known or not getattr(get_metric(name), "needs_judge", False):
                continue
            settings = {k: v for k, v in spec.items() if k != "name"} if isinstance(spec, dict) else {}
            try:
                judges = judges_from_settings(settings, str(name), cfg)
            except ConfigError as exc:  # no judge at all, an unknown name: the config check reports those
                out.append(f"metric {name} of {key}: {exc}")
                continue
            for judge in judges:
                var = judge.api_key_env
                if var and not env.get(var):
                    out.append(f"judge {judge.key!r} (metric {name} of {key}): environment variable {var} (its "
                               f"api_key_env) is not set; export it before the run (the rollouts would be paid for, "
                               f"then every verdict would fail)")
    return list(dict.fromkeys(out))
