"""The one try rule (docs/trust.md "A limit is a try"): every entry point — `evalpipe run`, `evaluate(benchmarks=...)`,
`evaluate(agent=..., dataset=...)` and its wrappers (`Evaluator`, `GAIA().run`), the checkpoint sensor — decides here
whether what it was asked to evaluate is a *try*, and under which keys. A try never writes a configured partition or
the shared `dataset` partition of a configured split (that partition is keyed by split only: every model reads it).

- A limit (`limit=N`, `--limit N`, a `limit` option that is not the configured split's): the model key
  `<model>@limit<N>` over the whole split (the `prompts` stage takes the first N, `run_marks.limit_of`).
- Sample ids (`sample_ids=`, `--sample-id`): the model key `<model>@ids-<h>` (`run_marks.selection_of`).
- A Python call's dataset that is not the configured split of its key — a `levels`/`max_n` subset, or other data,
  adapter or options under a configured name: its own split `<benchmark>@subset-<h>/<split>` (its own `dataset`
  partition, so nothing shared is rewritten) and the model key `<model>@subset-<h>`, `<h>` a hash of what the
  dataset is made of (the same call again resumes the same keys).
- Run-time options that would reshape a configured split's dataset are refused (`schema.dataset_shaping`).

Keys with these marks are tries everywhere: the leaderboard leaves them out (`run_marks.is_limited`), runs are tagged
`evals/try=<kind>` (`partitions.try_kind`), `evaluate()`'s metrics carry a `try` column.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.core.config import EvalConfig, SplitConfig
from evalpipe.core.errors import ConfigError
from evalpipe.core.run_marks import is_limited, limited_key, run_limit, selected_key, subset_key

LIMIT = "limit"
# options that choose some of a split's samples: in a Python call (not the configured split's), a try
SUBSET_OPTIONS = ("levels", "max_n")


@dataclass
class Try:
    """What one request evaluates, as a try or not: `limit` (the first N), `sample_ids`, `subset` (the hash of a
    Python call's own split). Nothing set: the configured partitions themselves."""

    limit: int | None = None
    sample_ids: list[str] = field(default_factory=list)
    subset: str | None = None
    reason: str = ""  # why the dataset is a subset split, for the message a call prints

    @property
    def is_try(self) -> bool:
        return bool(self.limit or self.sample_ids or self.subset)

    def model_key(self, key: str) -> str:
        """`key` with this try's marks: subset, then sample ids, then limit."""
        if self.subset:
            key = subset_key(key, self.subset)
        if self.sample_ids:
            key = selected_key(key, self.sample_ids)
        if self.limit:
            key = limited_key(key, self.limit)
        return key


def configured_try(limit: Any, split_options: dict[str, Any], sample_ids: list[str] | None = None,
                   flag: str = "--limit {}", option: str = "--benchmark-option limit={}",
                   ids_flag: str = "--sample-id") -> Try:
    """The try of a run over configured splits (`evalpipe run`, `evaluate(benchmarks=...)`): `limit` and a `limit`
    among the run's split options (popped from `split_options`: it must never reach the shared `dataset` stage) are
    one limit; `sample_ids` the selection. Options that would reshape the dataset are refused where the run's
    options are checked (`schema.check_run_options`)."""
    n = run_limit(limit, split_options, flag, option)
    if n is not None and sample_ids:
        raise ConfigError(f"{flag.split()[0].split('=')[0]} and {ids_flag} are two tries over part of a split: give "
                          f"one (the ids already name the samples)")
    return Try(limit=n, sample_ids=list(sample_ids or []))


# ---- a Python call's dataset ------------------------------------------------------------------------------------------
def _splits_of(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    splits = entry.get("splits")
    if isinstance(splits, dict):
        return {str(k): dict(v or {}) for k, v in splits.items()}
    return {str(s): {} for s in (splits or [])}


def _pop_limits(entry: dict[str, Any]) -> set[Any]:
    """Remove every `limit` from a benchmark entry (its options and its splits' options); the values removed."""
    found = set()
    if LIMIT in (entry.get("options") or {}):
        found.add(entry["options"].pop(LIMIT))
    if isinstance(entry.get("splits"), dict):
        for opts in entry["splits"].values():
            if isinstance(opts, dict) and LIMIT in opts:
                found.add(opts.pop(LIMIT))
    return found


def _normal(value: Any, base_dir: Path) -> Any:
    """An option value as the dataset sees it: a relative path that exists, resolved (two configs in two folders
    naming the same files are the same dataset)."""
    if isinstance(value, dict):
        return {str(k): _normal(v, base_dir) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_normal(v, base_dir) for v in value]
    if isinstance(value, str) and value.strip() and "\n" not in value and len(value) < 4096:
        p = Path(os.path.expandvars(value)).expanduser()
        p = p if p.is_absolute() else base_dir / p
        try:
            if p.exists():
                return str(p.resolve())
        except OSError:
            pass
    return value


def dataset_identity(split: SplitConfig, without: tuple[str, ...] = (LIMIT,)) -> dict[str, Any]:
    """What a split's `dataset` partition is made of: adapter, split, the options that shape its rows (not the
    run-time ones, not `without`), the prompt template."""
    from evalpipe.project.schema import RUN_TIME_SPLIT_OPTIONS

    from evalpipe.benchmarks.protocols import without_protocol_additions

    # what an adapter's protocol preparation added to a (shared, cached) split's options is not the split's own
    options = {k: v for k, v in without_protocol_additions(split.options).items()
               if k not in RUN_TIME_SPLIT_OPTIONS and k not in without}
    return {"adapter": split.adapter, "split": split.split, "options": _normal(options, split.base_dir),
            "prompt_template": _normal(split.prompt_template, split.base_dir)}


def configured_splits(*configs: EvalConfig | None) -> dict[str, SplitConfig]:
    """The splits the given configs declare (the first config naming a key wins)."""
    out: dict[str, SplitConfig] = {}
    for cfg in configs:
        for key, split in (cfg.splits if cfg is not None else {}).items():
            out.setdefault(key, split)
    return out


def python_try(bench: str, entry: dict[str, Any], build_splits: Any, configured: dict[str, SplitConfig],
               limit: Any = None, sample_ids: list[str] | None = None) -> tuple[str, dict[str, Any], Try]:
    """(benchmark name, benchmark entry, try) for a Python call's dataset `entry` named `bench`.

    `build_splits(bench, entry)` gives the entry's SplitConfigs (as the project will resolve them); `configured`
    the splits the config files declare. The call's `limit` and any `limit` in the entry that is not the configured
    split's are one try limit; `levels`/`max_n`, or a dataset other than the configured split of the same key, make
    the call's own split `<bench>@subset-<h>`."""
    from evalpipe.core.fingerprint import fingerprint

    entry = copy.deepcopy(entry)
    popped = _pop_limits(entry)
    splits = build_splits(bench, entry)
    kept: dict[str, Any] = {}  # split -> the configured split's own `limit`, put back (it defines that split)
    entry_limits: set[Any] = set()
    for s in splits:
        cfg_split = configured.get(s.key)
        cfg_limit = cfg_split.options.get(LIMIT) if cfg_split is not None else None
        for value in popped:
            if cfg_limit is not None and str(value) == str(cfg_limit):
                kept[s.split] = cfg_limit
            else:
                entry_limits.add(value)
    if len(entry_limits) > 1:
        raise ConfigError(f"dataset {bench!r}: several limits {sorted(map(str, entry_limits))}; give one (limit=N: "
                          f"the first N samples, a try under <model>@limit<N>)")
    options: dict[str, Any] = {LIMIT: next(iter(entry_limits))} if entry_limits else {}
    n = run_limit(limit, options, "limit={}", "the dataset's limit {}")
    if n is not None and sample_ids:
        raise ConfigError("give limit or sample_ids, not both (two tries over part of the dataset)")
    if kept:
        entry["splits"] = _splits_of(entry)
        for name, value in kept.items():
            entry["splits"][name][LIMIT] = value
        splits = build_splits(bench, entry)

    reasons = []
    for s in splits:
        cfg_split = configured.get(s.key)
        chosen = {k: s.options[k] for k in SUBSET_OPTIONS if s.options.get(k) is not None}
        configured_choice = {k: cfg_split.options[k] for k in SUBSET_OPTIONS
                             if cfg_split is not None and cfg_split.options.get(k) is not None}
        if chosen != configured_choice:
            reasons.append(f"{s.key}: " + ", ".join(f"{k}={v!r}" for k, v in chosen.items()) if chosen else
                           f"{s.key}: not the configured {', '.join(sorted(configured_choice))}")
        elif cfg_split is not None and dataset_identity(s) != dataset_identity(cfg_split):
            reasons.append(f"{s.key}: other data or options than the configured split")
    subset = None
    if reasons:
        subset = fingerprint(sorted((dataset_identity(s, ()) for s in splits), key=repr), 12)
        bench = subset_key(bench, subset)
    return bench, entry, Try(limit=n, sample_ids=list(sample_ids or []), subset=subset, reason="; ".join(reasons))


def refuse_try_key(model_key: str, what: str) -> str | None:
    """None when `model_key` can be a real model's key; else why not (one line): a key that reads as a try
    (`@limit<N>`, `@ids-<h>`, `@subset-<h>`) would be evaluated on part of a split and never ranked."""
    if is_limited(model_key):
        return (f"{what}: its key {model_key!r} reads as a try (<model>@limit<N>, @ids-<h> or @subset-<h>): it would "
                f"be evaluated on part of its splits and never ranked; rename it without '@'")
    return None
