"""Thin wrappers for the calls of the design references (docs/design_refs.md), over `evalpipe.evaluate`:

    Evaluator(protocol="multi_turn", dataset=dataset).evaluate(agent, samples)   # DSGym (002_*)
    DatasetRegistry.load("qrdata").load(split="test", limit=10)                  # DSGym, without a config file
    await GAIA(evaluator=fn).run(run_task, level=1, max_n=5, out="results.jsonl")  # the GAIA lab (003_*)

Both return `Results` (evalpipe/api/results.py; DSGym's result dict by `results["aggregated_metrics"]`); the
evaluation is an ordinary evalpipe run, in the warehouse and the Dagster instance like any other. Every keyword
the documents use is either mapped to what evalpipe does (docs/design_refs.md) or refused in one line when the
object is built, before any model call.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Callable

from evalpipe.api.results import Results
from evalpipe.api.run import evaluate_python
from evalpipe.store.dsgym_layout import write_dsgym_layout

SHIPPED_GAIA = Path(__file__).resolve().parents[2] / "data" / "gaia_sample"  # the GAIA-format sample we ship


def metric_configs_of(specs: list[Any]) -> dict[str, dict[str, Any]]:
    """{name: settings} of metric entries (`"exact_match"` or `{"name": ..., <settings>}`)."""
    out: dict[str, dict[str, Any]] = {}
    for spec in specs or []:
        if isinstance(spec, str):
            out[spec] = {}
        elif isinstance(spec, dict) and "name" in spec:
            out[str(spec["name"])] = {k: v for k, v in spec.items() if k != "name"}
    return out


def _field(config: Any, name: str) -> Any:
    if config is None:
        return None
    return config.get(name) if isinstance(config, dict) else getattr(config, name, None)


def write_viewable_samples(results: Results, path: str | Path) -> Path:
    """The call's per-sample records at `path` as the run artifacts' `samples.jsonl` (what `evalpipe view FILE`
    reads: prompt, prediction, metadata with the GAIA level, `scores` with each metric's verdict), redacted as the
    artifacts are. One finished partition per file (its sample ids are unique only within it)."""
    from evalpipe.core.errors import ConfigError
    from evalpipe.store.artifacts import stream_samples

    finished = [(p.benchmark_split, p.model) for p in results.result.partitions if p.success]
    if len(finished) != 1:
        raise ConfigError(f"a results file holds one finished partition; this call has {len(finished)} "
                          f"(errors: {results.errors or 'none'})")
    target = Path(path).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", encoding="utf-8") as fh:
        stream_samples(*finished[0], results.result.warehouse,
                       lambda name, text: fh.write(text) if name == "samples.jsonl" else None)
    return target


def save(results: Results, output_dir: str | Path) -> Path:
    """`samples.jsonl` (the viewable records: `evalpipe view <dir>/samples.jsonl` shows their verdicts) and
    `metrics.json` of `results` in `output_dir` (the references' "save results"), and DSGym's layout of its
    finished partitions beside them: `evaluation_results.json`, `metrics_summary.json`, `sample_predictions/`
    (evalpipe/store/dsgym_layout.py)."""
    out = Path(output_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    finished = [(p.benchmark_split, p.model) for p in results.result.partitions if p.success]
    if finished:
        write_dsgym_layout(finished, results.result.warehouse, out)
    if len(finished) == 1:
        write_viewable_samples(results, out / "samples.jsonl")
    else:  # several partitions: one viewable file each
        for split, model in finished:
            from evalpipe.interop.results_file import samples_name
            from evalpipe.store.artifacts import stream_samples

            with open(out / samples_name(split, model), "w", encoding="utf-8") as fh:
                stream_samples(split, model, results.result.warehouse,
                               lambda name, text: fh.write(text) if name == "samples.jsonl" else None)
    (out / "metrics.json").write_text(json.dumps(results.metrics.to_dict("records"), indent=2, default=str),
                                      encoding="utf-8")
    return out


class DatasetSamples(list):
    """The samples `Dataset.load` returns (dicts: `id`, `input`, `target`, `metadata`, `choices`, `files`); handed
    to `Evaluator.evaluate` they are run as the benchmark itself (its prompts and default metrics), not as records."""

    def __init__(self, rows: list[dict[str, Any]], entry: dict[str, Any], limit: int | None):
        super().__init__(rows)
        self.entry, self.limit = entry, limit

    def dataset(self) -> "Dataset":
        return Dataset(self.entry["adapter"], self.entry.get("options") or {})


class Dataset:
    """One benchmark adapter with its options, no config file: DSGym's `DatasetRegistry.load(name)` result."""

    def __init__(self, name: str, options: dict[str, Any]):
        self.name, self.options = name, dict(options)

    def entry(self, split: str = "test") -> dict[str, Any]:
        """The benchmark entry (as in evals.yaml) for `split`."""
        return {"adapter": self.name, "splits": [split], "options": dict(self.options)}

    def _adapter(self, split: str) -> Any:
        from evalpipe.benchmarks import adapter_for
        from evalpipe.core.config import SplitConfig

        return adapter_for(SplitConfig(key=f"{self.name}/{split}", benchmark=self.name, split=split,
                                       adapter=self.name, options=dict(self.options), metrics=None,
                                       prompt_template=None, base_dir=Path.cwd()))

    def load(self, split: str = "test", limit: int | None = None) -> DatasetSamples:
        """The split's samples (the first `limit`; evaluated, the split's `limit` option, as `evaluate(limit=)`)."""
        rows = []
        for sample in self._adapter(split).load():
            if limit is not None and len(rows) >= limit:
                break
            rows.append({"id": sample.id, "input": sample.input, "target": sample.target,
                         "metadata": dict(sample.metadata), "choices": sample.choices, "files": list(sample.files)})
        return DatasetSamples(rows, self.entry(split), limit)

    def get_metrics(self, split: str = "test") -> list[Any]:
        """The metrics the benchmark is scored with by default (DSGym's `get_metrics()`)."""
        return self._adapter(split).metrics()

    def get_metric_configs(self, split: str = "test") -> dict[str, dict[str, Any]]:
        """DSGym's `get_metric_configs()`: {metric name: its settings} of the default metrics (empty settings for
        a metric used as it is)."""
        return metric_configs_of(self.get_metrics(split))


class DatasetRegistry:
    """DSGym's `DatasetRegistry`: `load(name, **options)` gives a benchmark adapter by name (`evalpipe adapters`
    lists them) with its options (`path`, `limit`, ...), no config file needed."""

    @staticmethod
    def list_datasets() -> list[str]:
        from evalpipe.benchmarks import list_adapters

        return list_adapters()

    @staticmethod
    def load(name: str, **options: Any) -> Dataset:
        from evalpipe.benchmarks import get_adapter

        get_adapter(name)  # an unknown name fails here, listing the known ones
        return Dataset(name, options)


def _known_settings(metric: str) -> set[str] | None:
    """The settings metric `metric` declares (None: it declares none, so any are passed to it as they are)."""
    from evalpipe.metrics.base import get_metric

    return _schema_names(getattr(get_metric(metric), "option_schema", None))  # an unknown name fails there


def _schema_names(schema: Any) -> set[str] | None:
    """The option names an `option_schema` declares (a set of names or a pydantic model; None: undeclared)."""
    if schema is None:
        return None
    if isinstance(schema, (set, frozenset, list, tuple, dict)):
        return set(schema)
    fields = getattr(schema, "model_fields", None)
    return set(fields) if fields is not None else None


def check_metric_configs(metric_configs: Any) -> dict[str, dict[str, Any]]:
    """DSGym's `metric_configs={metric: {setting: value}}`, each metric a registered one and each setting one it
    declares; a one-line ConfigError otherwise."""
    from evalpipe.core.errors import ConfigError

    if metric_configs is None:
        return {}
    if not isinstance(metric_configs, dict) or not all(isinstance(v, dict) for v in metric_configs.values()):
        raise ConfigError(f"metric_configs= takes {{metric name: {{setting: value}}}}, got {metric_configs!r}")
    for name, settings in metric_configs.items():
        known = _known_settings(str(name))
        unknown = sorted(set(settings) - known) if known is not None else []
        if unknown:
            raise ConfigError(f"metric_configs[{name!r}]: {unknown[0]!r} is not a setting of {name}; its settings: "
                              f"{', '.join(sorted(known)) or 'none'} (`evalpipe metrics` lists them)")
    return {str(k): dict(v) for k, v in metric_configs.items()}


def _whole(value: Any, label: str) -> int | None:
    from evalpipe.core.errors import ConfigError

    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{label} must be a whole number >= 1, got {value!r}")
    return value


def _is_function_agent(agent: Any) -> bool:
    """An agent that runs its own loop (a function), as opposed to a model evalpipe converses with."""
    from evalpipe.api.decorators import AgentFunction
    from evalpipe.runners.base import Runner

    if isinstance(agent, (str, Runner)) or (isinstance(agent, type) and issubclass(agent, Runner)):
        return False
    return isinstance(agent, AgentFunction) or callable(agent)


class Evaluator:
    """DSGym's `Evaluator(protocol=..., dataset=..., metrics=..., max_turns=..., metric_configs=...,
    parallel_workers=...)`; other keyword options go to `evalpipe.evaluate`.

    - `dataset`: `DatasetRegistry.load(name)` (its samples and default metrics) or a benchmark name of `config`,
      used when `evaluate` gets no samples;
    - `protocol`: `multi_turn` (DSGym's default: the model works in a loop with the tools the split offers; for
      the data-science benchmarks the stateful `python` tool) or `single_turn` (one reply, no tools). A benchmark
      whose adapter has the `protocol` option (daeval, discoverybench, qrdata, bio) gets it as that option;
    - `max_turns`: the bound on that loop's model turns, honoured by the loop evalpipe runs for a model agent (a
      model string or a Runner); a function agent runs its own loop, so `max_turns` with one is refused;
    - `metric_configs`: settings per metric name, applied to the metrics evaluated (given or the dataset's
      defaults); an entry for a metric not evaluated changes nothing, as in DSGym;
    - `parallel_workers`: samples at once (`concurrency`).
    Every value is checked here, before any model call."""

    def __init__(self, metrics: list[Any] | None = None, dataset: Any = None, *, protocol: str | None = None,
                 max_turns: int | None = None, metric_configs: dict[str, dict[str, Any]] | None = None,
                 parallel_workers: int | None = None, **options: Any):
        from evalpipe.api.run import PYTHON_OPTION_NAMES
        from evalpipe.benchmarks.protocols import PROTOCOLS
        from evalpipe.core.errors import ConfigError
        from evalpipe.project.schema import did_you_mean

        unknown = sorted(set(options) - set(PYTHON_OPTION_NAMES))
        if unknown:
            names = (*PYTHON_OPTION_NAMES, "protocol", "max_turns", "metric_configs", "parallel_workers")
            raise ConfigError(f"Evaluator() got unknown option {unknown[0]!r}{did_you_mean(unknown[0], names)}")
        if protocol is not None:
            protocol = str(protocol).strip().lower().replace("-", "_")
            if protocol not in PROTOCOLS:
                raise ConfigError(f"protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
        self.max_turns = _whole(max_turns, "max_turns")
        if protocol == "single_turn" and self.max_turns is not None:
            raise ConfigError("protocol='single_turn' is one reply: max_turns does not apply; drop it or use "
                              "protocol='multi_turn'")
        if parallel_workers is not None:
            if options.get("concurrency") is not None:
                raise ConfigError("give parallel_workers or concurrency, not both (they are the same setting)")
            options["concurrency"] = _whole(parallel_workers, "parallel_workers")
        self.protocol, self.metric_configs = protocol, check_metric_configs(metric_configs)
        self.metrics, self.dataset, self.options = metrics, dataset, options

    def _metrics(self, entry: dict[str, Any] | None, split: str) -> Any:
        """The metrics to evaluate, with `metric_configs` applied (to the dataset's defaults when none are given)."""
        metrics = self.metrics
        if not self.metric_configs:
            return metrics
        if metrics is None:
            if entry is None:
                return None  # a dataset of the config: its own metrics, as configured
            metrics = Dataset(entry["adapter"], entry.get("options") or {}).get_metrics(split)
        out = []
        for m in [metrics] if isinstance(metrics, (str, dict)) else metrics:
            name = m if isinstance(m, str) else m.get("name") if isinstance(m, dict) else None
            if name in self.metric_configs:
                m = {**({} if isinstance(m, str) else m), "name": name, **self.metric_configs[name]}
            out.append(m)
        return out

    def _with_protocol(self, agent: Any, data: Any, options: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
        """`data` as a benchmark entry carrying the protocol and max_turns as split options (entry, or None when
        `data` is a dataset of the config, which keeps its own)."""
        from evalpipe.core.errors import ConfigError

        if self.max_turns is not None and _is_function_agent(agent):
            raise ConfigError("max_turns bounds the loop evalpipe runs for a model agent (a model string or a "
                              "Runner); a function agent runs its own loop: bound it in the function, or drop "
                              "max_turns")
        if isinstance(data, dict) and "adapter" in data:
            entry = data
        elif (self.protocol or self.max_turns or self.metric_configs) and not (
                isinstance(data, str) and data in (self._config_benchmarks(options))):
            from evalpipe.api.python import dataset_entry, load_base_config

            base, base_dir = load_base_config(options.get("config"))
            name, entry = dataset_entry(data, base, base_dir, options.pop("columns", None), options.get("name"))
            options["name"] = name
        else:
            if self.protocol == "single_turn" and options.get("tools"):
                raise ConfigError("protocol='single_turn' offers no tools; drop tools= or use protocol='multi_turn'")
            return data, None
        entry = {**entry, "options": dict(entry.get("options") or {})}
        opts = entry["options"]
        from evalpipe.benchmarks import get_adapter

        takes_protocol = "protocol" in (_schema_names(getattr(get_adapter(entry["adapter"]), "option_schema", None))
                                        or ())
        if self.protocol is not None and takes_protocol:
            opts["protocol"] = self.protocol
        elif self.protocol == "single_turn" and (entry.get("tools") or opts.get("tools") or options.get("tools")):
            raise ConfigError(f"protocol='single_turn' offers no tools, but {entry['adapter']!r} samples offer "
                              f"some; drop them or use protocol='multi_turn'")
        if self.max_turns is not None:
            opts["max_turns"] = self.max_turns
        return entry, entry

    def _config_benchmarks(self, options: dict[str, Any]) -> set[str]:
        if not options.get("config"):
            return set()
        from evalpipe.api.python import load_base_config

        return set((load_base_config(options["config"])[0].get("benchmarks") or {}))

    def evaluate(self, agent: Any, samples: Any = None, config: Any = None, save_results: bool = False) -> Results:
        """Run `agent` on `samples` (a list of dicts, a DataFrame, or `dataset.load(...)`'s samples; default: the
        evaluator's dataset). `config`: a dict or object with `model_name`, `dataset_name`, `output_dir` (DSGym's
        EvaluationConfig fields; its other fields are DSGym's own and are not read)."""
        from evalpipe.core.errors import ConfigError

        data = samples if samples is not None else self.dataset
        if data is None:
            raise ConfigError("Evaluator.evaluate needs samples, or Evaluator(dataset=<benchmark name or "
                              "DatasetRegistry.load(name)>)")
        options = dict(self.options)
        split = "test"
        if isinstance(data, DatasetSamples):  # run as the benchmark itself, its prompts and default metrics
            if data.limit is not None:
                options.setdefault("limit", data.limit)
            options.setdefault("name", data.entry["adapter"])
            split = (data.entry.get("splits") or ["test"])[0]
            data = data.entry
        elif isinstance(data, Dataset):
            options.setdefault("name", data.name)
            data = data.entry()
        for ours, theirs in (("model_name", "model_name"), ("name", "dataset_name")):
            if _field(config, theirs) and ours not in options:
                options[ours] = _field(config, theirs)
        data, entry = self._with_protocol(agent, data, options)
        results = evaluate_python(agent, data, self._metrics(entry, split), **options)
        if save_results:
            save(results, _field(config, "output_dir") or "results")
        return results


def gaia_evaluator_metric(evaluator: Callable[..., Any]) -> dict[str, Any]:
    """The GAIA lab's `evaluator(task, prediction) -> Evaluation(is_correct, score, details)` (sync or async) as a
    metric of its own name, scored beside the official `gaia` scorer; its identity is the evaluator's fingerprint
    (an edited evaluator makes the judgements stale)."""
    import inspect

    from evalpipe.core.callables import callable_fingerprint, callable_name
    from evalpipe.core.types import Score
    from evalpipe.metrics.function import register_function_metric
    from types import SimpleNamespace

    def task_and_prediction(prediction: Any, target: Any, sample: Any) -> tuple[Any, Any]:
        meta = dict(getattr(sample, "metadata", None) or {})
        task = SimpleNamespace(task_id=getattr(sample, "sample_id", None), question=getattr(sample, "input", None),
                               answer=target, level=meta.get("Level", meta.get("level")),
                               file_name=meta.get("file_name"), metadata=meta)
        return task, SimpleNamespace(prediction=prediction or "", messages=getattr(sample, "trajectory", None),
                                     metadata={})

    def verdict(evaluation: Any) -> Any:
        if evaluation is None or isinstance(evaluation, (bool, int, float, Score)):
            return evaluation
        get = evaluation.get if isinstance(evaluation, dict) else (lambda k: getattr(evaluation, k, None))
        correct, score, details = get("is_correct"), get("score"), get("details")
        value = float(score) if score is not None else (None if correct is None else float(bool(correct)))
        return Score(value=value, correct=None if correct is None else bool(correct),
                     reason="" if details is None else str(details))

    if inspect.iscoroutinefunction(evaluator):
        async def lab_evaluator(prediction: Any, target: Any, sample: Any) -> Any:
            return verdict(await evaluator(*task_and_prediction(prediction, target, sample)))
    else:
        def lab_evaluator(prediction: Any, target: Any, sample: Any) -> Any:
            return verdict(evaluator(*task_and_prediction(prediction, target, sample)))

    name = callable_name(evaluator)
    name = name if name.isidentifier() and name not in ("gaia", "evaluate") else "lab_evaluator"
    entry = register_function_metric(lab_evaluator, name, higher_is_better=True, requires_target=True)
    return {**entry, "source": callable_fingerprint(evaluator)}


def _has_gaia_data(folder: Path) -> bool:
    return folder.is_dir() and (any(folder.rglob("metadata.parquet")) or any(folder.rglob("metadata.jsonl")))


class GAIA:
    """The GAIA lab's runner: `await GAIA(evaluator=..., data_dir=..., hf_token=...).run(run_task, level=...,
    max_n=..., parallel=..., timeout=..., out=...)`.

    - `path` / `data_dir`: a GAIA folder (default: the GAIA-format sample shipped in data/gaia_sample). A
      `data_dir` that holds no GAIA data yet is where the gated Hub dataset is downloaded to (and read from
      afterwards), as the lab's cache folder; `hub=True` downloads into the Hugging Face cache;
    - `hf_token`: the Hub token for that download, handed to the Hub client for the call only (never written to
      the config, the warehouse, the artifacts or a log); without it, `$HF_TOKEN`;
    - `evaluator`: the lab's `(task, prediction) -> Evaluation` as a metric of its name beside the official `gaia`
      scorer (both reported);
    - `telemetry_config` is refused: evalpipe's tracing is `EVALS_TRACING` (docs/operations.md, Tracing);
    - `split`: validation (default) or test; other keywords: the `gaia` adapter's options (docs/benchmarks.md)."""

    def __init__(self, path: str | Path | None = None, split: str = "validation", hub: bool = False, *,
                 evaluator: Callable[..., Any] | None = None, data_dir: str | Path | None = None,
                 hf_token: str | None = None, telemetry_config: Any = None, **options: Any):
        from evalpipe.benchmarks import get_adapter
        from evalpipe.core.errors import ConfigError

        if telemetry_config is not None:
            raise ConfigError("GAIA(telemetry_config=) is the lab's tracing set-up; evalpipe traces with "
                              "EVALS_TRACING=jsonl:<file> | otlp:<endpoint> | azure_monitor:<ENV_VAR> set before the "
                              "call (docs/operations.md, Tracing): drop telemetry_config")
        known = set(get_adapter("gaia").option_schema) - {"path", "levels", "max_n"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"GAIA() got unknown option {unknown[0]!r}; it takes path, split, hub, evaluator, "
                              f"data_dir, hf_token and the gaia adapter's options ({', '.join(sorted(known))})")
        if path is not None and data_dir is not None:
            raise ConfigError("give GAIA(path=) or GAIA(data_dir=), not both (each names the GAIA folder)")
        if evaluator is not None and not callable(evaluator):
            raise ConfigError(f"evaluator= takes a function (task, prediction) -> Evaluation, got "
                              f"{type(evaluator).__name__}")
        if hf_token is not None and (not isinstance(hf_token, str) or not hf_token.strip()):
            raise ConfigError("hf_token= takes the Hugging Face token as a non-empty string (or leave it out to use "
                              "$HF_TOKEN)")
        self.data_dir = Path(data_dir).expanduser() if data_dir is not None else None
        if self.data_dir is not None and _has_gaia_data(self.data_dir):
            path, self.data_dir = self.data_dir, None  # a GAIA folder: read as it is
        self.hub = hub or self.data_dir is not None
        self.path = None if self.hub else Path(path or SHIPPED_GAIA)
        self._token = hf_token  # kept on this object only (repr hides it)
        self.split, self.options, self.evaluator = split, options, evaluator

    def __repr__(self) -> str:
        where = self.path or f"the Hub{f' into {self.data_dir}' if self.data_dir else ''}"
        return f"GAIA({where}, split={self.split!r}, hf_token={'***' if self._token else None})"

    def _hub_folder(self) -> Path:
        """The downloaded split (from the cache when it is there), with `hf_token` for this call only."""
        from evalpipe.benchmarks import hub
        from evalpipe.benchmarks.gaia import GAIA_REPO

        year = str(self.options.get("year", "2023"))
        split = str(self.options.get("hf_split") or self.split)
        return hub.download_snapshot(
            str(self.options.get("repo_id") or GAIA_REPO), repo_type="dataset", allow_patterns=[f"{year}/{split}/*"],
            revision=self.options.get("revision"), cache_dir=self.data_dir or self.options.get("cache_dir"),
            token_env=self.options.get("token_env") or "HF_TOKEN", endpoint=self.options.get("endpoint"),
            what=f"split {year}/{split}", token=self._token,
            fix_local="pass GAIA(path=) or GAIA(data_dir=) a local copy (e.g. data/gaia_sample)")

    async def run(self, task_runner: Callable[..., Any], level: int | list[int] | None = None,
                  max_n: int | None = None, parallel: int | None = None, timeout: float | None = None,
                  out: str | Path | None = None, **options: Any) -> Results:
        """Evaluate `task_runner` (sync or async; gets a task with `.question`, `.files`, `.metadata["Level"]`;
        returns the answer text or an object with `prediction`) with the official GAIA scorer (and `evaluator`).
        `out`: the per-sample results file `evalpipe view` reads (prediction, the GAIA level, each metric's
        verdict)."""
        bench_options: dict[str, Any] = {**self.options}
        if self.path is not None:
            bench_options["path"] = str(self.path)
        elif self._token is not None or self.data_dir is not None:
            # downloaded here, so the token never enters the split's options (which are hashed and recorded)
            bench_options = {k: v for k, v in bench_options.items()
                             if k not in ("repo_id", "revision", "cache_dir", "token_env", "endpoint")}
            bench_options["path"] = str(await asyncio.to_thread(self._hub_folder))
        if level is not None:
            bench_options["levels"] = [level] if isinstance(level, int) else list(level)
        if max_n is not None:
            bench_options["max_n"] = int(max_n)
        metrics: list[Any] = ["gaia", "gaia_strict"]  # the official score, the stricter reading beside it
        if self.evaluator is not None:
            metrics.append(gaia_evaluator_metric(self.evaluator))
        entry = {"adapter": "gaia", "splits": [self.split], "options": bench_options, "metrics": metrics}
        run_options = {**options, "name": options.get("name", "gaia")}
        if parallel is not None:
            run_options["concurrency"] = int(parallel)
        if timeout is not None:
            run_options["timeout_s"] = float(timeout)
        results = await asyncio.to_thread(evaluate_python, task_runner, entry, None, **run_options)
        if out is not None:
            write_viewable_samples(results, out)
        return results
