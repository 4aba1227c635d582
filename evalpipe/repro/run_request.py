"""A run request, prepared the same way for `evalpipe run` (evalpipe/cli/main.py) and `evalpipe.evaluate`
(evalpipe/api.py): the reproducibility options turned into split options, runner options, tags and resources
(`RunOptions`), the runner overrides as a `model_runner` resource (`runner_overrides`), and the checks that
refuse a run before it costs anything (`check_declared_options`, `check_judge_keys`). Errors are one-line
`ConfigError`s naming the CLI flags (`check_declared_options` takes the names the API uses instead).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.core.run_marks import RUN_ID_TAG

SHARD_TAG = "evalpipe/shard"


@dataclass
class RunOptions:
    num_shards: int | None = None
    shard_index: int | None = None
    prompt_wrapper: str | None = None
    experiment: str | None = None
    run_id: str | None = None
    no_fail_on_fingerprint_mismatch: bool = False
    epochs: int | None = None  # [epochs] split options for this run: each sample N times, reduced per sample
    epochs_reducer: str | None = None
    sample_ids: list[str] = field(default_factory=list)  # a try: the model keys `<model>@ids-<h>`
    output_path: str | None = None  # [interop] the run's portable results file (evalpipe/interop/results_file.py)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_kwargs(cls, kw: dict[str, Any]) -> "RunOptions":
        from evalpipe.core.errors import ConfigError

        ro = cls(**{k: kw.get(k) for k in ("num_shards", "shard_index", "prompt_wrapper", "experiment", "run_id")},
                 no_fail_on_fingerprint_mismatch=bool(kw.get("no_fail_on_fingerprint_mismatch")),
                 epochs=kw.get("epochs"), epochs_reducer=kw.get("epochs_reducer"),
                 sample_ids=_id_list(kw.get("sample_ids")), output_path=kw.get("output_path"))
        if ro.epochs is not None and (isinstance(ro.epochs, bool) or not isinstance(ro.epochs, int) or ro.epochs < 1):
            raise ConfigError(f"--epochs must be a whole number >= 1 (each sample N times), got {ro.epochs!r}")
        if ro.epochs_reducer is not None:
            from evalpipe.metrics.aggregate import epoch_reducer

            try:
                epoch_reducer(ro.epochs_reducer, ro.epochs)
            except ValueError as exc:
                raise ConfigError(f"--epochs-reducer: {exc}") from None
        if (ro.num_shards is None) != (ro.shard_index is None):
            raise ConfigError("--num-shards and --shard-index go together (e.g. --num-shards 4 --shard-index 0)")
        if ro.num_shards is not None and ro.shard_index >= ro.num_shards:
            raise ConfigError(f"--shard-index must be in 0..{ro.num_shards - 1} for --num-shards {ro.num_shards}")
        if ro.run_id is not None:
            from evalpipe.store.artifacts import safe_run_id

            try:
                safe_run_id(ro.run_id)
            except ValueError as exc:
                raise ConfigError(f"--run-id: {exc}") from None
        if ro.prompt_wrapper is not None:
            from evalpipe.pipeline.prompt_wrappers import load_wrapper

            ro.prompt_wrapper = str(Path(ro.prompt_wrapper).expanduser().resolve())
            load_wrapper(ro.prompt_wrapper, Path.cwd())  # a bad wrapper is a usage error before any run
        return ro

    @property
    def sharded(self) -> bool:
        return self.num_shards is not None and self.num_shards > 1

    def model_keys(self, keys: list[str], cfg: Any = None) -> list[str]:
        if cfg is not None:  # `name` of an entry with `experiment:` is its partition key `name@experiment`
            keys = [_resolve_key(cfg, k) for k in keys]
        if self.experiment:
            from evalpipe.core.keys import sanitize_key

            exp = sanitize_key(self.experiment)
            keys = [f"{k.split('@', 1)[0]}@{exp}" for k in keys]
        return self.selected_keys(keys)

    def models_per_split(self, cfg: Any, splits: list[str], asked: list[str] | None, limit: int | None = None,
                         resolve: Any = None) -> dict[str, list[str]]:
        """The model keys each split runs: `asked` (the same for every split), else the split's intended models
        (its benchmark's `models:`, else `default_models`), each list through `resolve` (the CLI's ad-hoc model
        strings), the experiment and `--sample-id` marks, and the `--limit` mark."""
        from evalpipe.project.tries import Try

        out: dict[str, list[str]] = {}
        done: dict[tuple[str, ...], list[str]] = {}
        for s in splits:
            names = tuple(asked) if asked else tuple(cfg.models_for(s))
            if names not in done:
                keys = self.model_keys(resolve(list(names)) if resolve else list(names), cfg)
                done[names] = [Try(limit=limit).model_key(k) for k in keys]
            out[s] = done[names]
        return out

    def run_try(self, limit: Any, split_options: dict[str, Any], flag: str = "--limit {}",
                option: str = "--benchmark-option limit={}", ids_flag: str = "--sample-id") -> Any:
        """The try rule (evalpipe/project/tries.py) for a run over configured splits: the limit (popped from
        `split_options`, never the shared dataset's) and this request's sample ids."""
        from evalpipe.project.tries import configured_try

        return configured_try(limit, split_options, self.sample_ids, flag, option, ids_flag)

    def selected_keys(self, keys: list[str]) -> list[str]:
        """With `--sample-id`: the try keys `<model>@ids-<h>`, the ids recorded beside the instance (every process
        of the run, and any later materialization of the key, reads them back); else `keys`."""
        if not self.sample_ids:
            return keys
        from evalpipe.core.run_marks import save_selection, selected_key

        save_selection(self.sample_ids)
        return [selected_key(k, self.sample_ids) for k in keys]

    def split_options(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.no_fail_on_fingerprint_mismatch:
            out["fail_on_fingerprint_mismatch"] = False
        if self.num_shards is not None:
            out["num_shards"], out["shard_index"] = self.num_shards, self.shard_index
        if self.epochs is not None:
            out["epochs"] = self.epochs
        if self.epochs_reducer is not None:
            out["epochs_reducer"] = self.epochs_reducer
        return out

    def runner_options(self) -> dict[str, Any]:
        return {"prompt_wrapper": self.prompt_wrapper} if self.prompt_wrapper else {}

    def tags(self) -> dict[str, str]:
        t = {}
        if self.run_id:
            t[RUN_ID_TAG] = self.run_id
        if self.sharded:
            t[SHARD_TAG] = f"{self.shard_index}/{self.num_shards}"
        return t

    def resources(self) -> dict[str, Any]:
        """A shard run writes its own warehouse (merged into the main one when every shard is there)."""
        if not self.sharded:
            return {}
        from evalpipe.repro.sharding import shard_warehouse_path
        from resources import WarehouseIOManager, WarehouseResource

        wh = WarehouseResource(path=str(shard_warehouse_path(self.num_shards, self.shard_index)))
        return {"warehouse": wh, "warehouse_io_manager": WarehouseIOManager(warehouse=wh)}

    def write_results_file(self, partitions: list[Any], wh: Any, cfg: Any, command: str) -> list[str]:
        """With `--output-path`/`output_path=`: the run's portable results file; the lines to print."""
        if not self.output_path:
            return []
        from evalpipe.interop.results_file import write_results_file

        run = {"command": command, "run_id": self.run_id, "success": all(p.success for p in partitions)}
        return [f"results file: {write_results_file(self.output_path, partitions, wh, cfg, run)}"]

    def after_run(self, cfg: Any, splits: list[str], models: list[str], instance: Any, say=None) -> list[str]:
        """After a shard run: merge every partition whose N shards are all done. Returns lines to print."""
        if not self.sharded:
            return []
        from evalpipe.repro.sharding import merge_shard_partitions

        return merge_shard_partitions(cfg, splits, models, self.num_shards, instance, tags=self.tags())


def _id_list(value: Any) -> list[str]:
    """`--sample-id` values (repeatable) or `sample_ids=` (a list, or one id): ids as strings, in order, once."""
    from evalpipe.core.errors import ConfigError

    if value is None:
        return []
    values = [value] if isinstance(value, (str, int)) else list(value)
    ids = [str(v).strip() for v in values]
    if any(not i for i in ids):
        raise ConfigError("--sample-id: an empty sample id; give each id as it appears in the split "
                          "(as in the split's data)")
    return list(dict.fromkeys(ids))


def _resolve_key(cfg: Any, key: str) -> str:
    try:
        return cfg.model(key).key
    except Exception:  # unknown: the run reports it with its own message
        return key


def sort_runner_options(runner_options: dict[str, Any], kw: dict[str, Any]) -> dict[str, Any]:
    """`kw` (ModelRunnerResource fields, with `params` and `options` dicts) updated from `k=v` runner options:
    `params.k` a decoding param, a resource field name that field, anything else a runner option."""
    from resources import ModelRunnerResource

    fields = set(ModelRunnerResource.model_fields) - {"params", "options"}
    for k, v in runner_options.items():
        if k.startswith("params."):
            kw["params"][k[len("params."):]] = v
        elif k in fields:
            kw[k] = v
        else:
            kw["options"][k] = v
    return kw


def runner_overrides(runner_options: dict[str, Any], concurrency: int | None, timeout_s: float | None):
    """ModelRunnerResource for this run: `k=v` sets the resource field `k` if it has one (e.g. max_retries),
    `params.k=v` a decoding param, anything else a runner option."""
    from resources import ModelRunnerResource

    kw = sort_runner_options(runner_options, {"params": {}, "options": {}})
    if concurrency is not None:
        kw["concurrency"] = concurrency
    if timeout_s is not None:
        kw["timeout_s"] = timeout_s
    try:
        return ModelRunnerResource(**kw)
    except Exception as exc:  # pydantic validation: a wrong type for a field
        from evalpipe.core.errors import ConfigError

        raise ConfigError(f"--runner-option: {str(exc).splitlines()[0]} ({exc})".splitlines()[0]) from None


def check_declared_options(cfg: Any, chosen: list[str], model_keys: list[str], split_options: dict[str, Any],
                           model_runner: Any, split_flag: str = "--benchmark-option",
                           runner_flag: str = "--runner-option") -> None:
    """Each run override against what the chosen splits' adapters and the chosen models' runners declare
    (evalpipe/project/schema.py `check_run_options`): an option none of them takes is refused, exit 2."""
    from evalpipe.project.schema import check_run_options

    check_run_options(cfg, chosen, model_keys, split_options, dict(model_runner.options), split_flag, runner_flag)


def check_judge_keys(cfg: Any, split_keys: list[str], environ: Any = None) -> None:
    """Before any rollout: each judge that a chosen split's model-graded metrics will call has its API key in the
    environment (its `api_key_env`); otherwise every rollout would be paid for and judging would then fail
    (evalpipe/project/schema.py `judge_key_problems`, which `evalpipe validate` runs too)."""
    from evalpipe.core.errors import ConfigError
    from evalpipe.project.schema import judge_key_problems

    problems = judge_key_problems(cfg, split_keys, environ)
    if problems:
        raise ConfigError(problems[0], problems=problems)
