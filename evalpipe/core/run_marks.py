"""Partition keys that say what kind of run made them.

- `--limit N` runs evaluate `<model>@limit<N>` (or `<model>@<experiment>-limit<N>`): their own partitions, so a
  quick look never overwrites (or passes for) the full results; the leaderboard leaves them out unless asked.
  The config resolves such a key to its base model (`EvalConfig.model`: `name@experiment`). The limit is read
  back from the key (`limit_of`) by the `prompts` stage, so every materialization of a key (CLI, `evaluate()`,
  the Dagster UI, a backfill) takes the same first N samples of the split, and a key without the mark takes all
  of them: the shared `dataset` partition always holds the whole split.
- `--sample-id ID` runs evaluate `<model>@ids-<h>` (or `<model>@<experiment>-ids-<h>`), `<h>` the first 12 hex
  digits of the SHA-256 of the sorted ids: a try, kept apart like `--limit`. The ids themselves are recorded beside
  the instance (`$DAGSTER_HOME/selections/<h>.json`, `save_selection`) and read back from the key
  (`selection_of`) by the `prompts` stage, so every materialization of the key takes the same samples.
- `--epochs N` needs no mark: it is a split option (each sample N times); epoch e > 1 of sample `<id>` is the
  prompt row `<id>#epoch<e>` (`epoch_id`), so each epoch has its own rollout fingerprint (docs/metrics.md "Epochs").
- `--model <litellm model string>` that is not a configured key becomes a temporary model entry
  `adhoc:<model string>` (runner litellm), recorded in the models registry beside the instance
  (`$DAGSTER_HOME/models/`) so every process of the run resolves it.
"""
from __future__ import annotations

import re
from typing import Any

from evalpipe.core.keys import sanitize_key

_LIMITED = re.compile(r"@(?:.*-)?limit(\d+)$")
_SELECTED = re.compile(r"@(?:.*-)?ids-([0-9a-f]{12})$")
# a Python call's dataset that is not the configured split's (a `levels`/`max_n` subset, other data under the same
# name): its own split `<benchmark>@subset-<h>` and model key `<model>@subset-<h>` (evalpipe/project/tries.py)
_SUBSET = re.compile(r"@(?:.*-)?subset-([0-9a-f]{12})(?:-|$)")
ADHOC_PREFIX = "adhoc:"
# the Dagster run tag of `evalpipe run --run-id` (it names the run's artifact folder)
RUN_ID_TAG = "evalpipe/run_id"


def limited_key(model_key: str, limit: int) -> str:
    if _SELECTED.search(str(model_key)):
        from evalpipe.core.errors import ConfigError

        raise ConfigError("--limit and --sample-id are two tries over part of a split: give one (--sample-id already "
                          "names the samples)")
    base, sep, experiment = model_key.partition("@")
    return f"{base}@{experiment}-limit{int(limit)}" if sep and experiment else f"{base}@limit{int(limit)}"


def is_limited(model_key: str) -> bool:
    """A try: `--limit` (`@limit<N>`), `--sample-id` (`@ids-<h>`) or a Python call's subset (`@subset-<h>`); never
    ranked."""
    return bool(_LIMITED.search(str(model_key)) or _SELECTED.search(str(model_key)) or _SUBSET.search(str(model_key)))


def is_subset(key: str) -> bool:
    """A model key or benchmark name with the subset mark `@subset-<h>`."""
    return bool(_SUBSET.search(str(key)))


def subset_key(key: str, h: str) -> str:
    """`key` (a model key or a benchmark name) with the subset mark: `<key>@subset-<h>` (after an experiment:
    `<model>@<experiment>-subset-<h>`)."""
    base, sep, experiment = str(key).partition("@")
    return f"{base}@{experiment}-subset-{h}" if sep and experiment else f"{base}@subset-{h}"


def limit_of(model_key: str) -> int | None:
    """N for a `<model>@limit<N>` / `<model>@<experiment>-limit<N>` key; None for a key that evaluates the whole
    split."""
    m = _LIMITED.search(str(model_key))
    return int(m.group(1)) if m else None


def run_limit(limit: Any, options: dict[str, Any], flag: str = "--limit {}",
              option: str = "--benchmark-option limit={}") -> int | None:
    """The run's limit from `limit` and a `limit` among the run's benchmark options (popped from `options`: it
    must never reach the `dataset` stage, whose partition every model key shares). Both name the same try; given
    twice with different values, or not a whole number >= 1, it is a ConfigError. `flag`/`option` spell the two
    in messages (the CLI's or evaluate()'s names)."""
    from evalpipe.core.errors import ConfigError

    def whole(value: Any, label: str) -> int:
        try:
            n = -1 if isinstance(value, bool) else int(str(value).strip())
        except (TypeError, ValueError):
            n = -1
        if n < 1 or (isinstance(value, float) and value != n):
            raise ConfigError(f"{label}: limit must be a whole number >= 1 (the first N samples, evaluated under "
                              f"the model key <model>@limit<N>)")
        return n

    given = options.pop("limit", None)
    from_option = whole(given, option.format(given)) if given is not None else None
    from_flag = whole(limit, flag.format(limit)) if limit is not None else None
    if from_flag is not None and from_option is not None and from_flag != from_option:
        raise ConfigError(f"{flag.format(from_flag)} and {option.format(from_option)} disagree: give one (both "
                          f"evaluate the first N samples under the model key <model>@limit<N>)")
    return from_flag if from_flag is not None else from_option


_EPOCH = re.compile(r"#epoch(\d+)$")


def epoch_id(sample_id: str, epoch: int) -> str:
    """The prompt row id of `sample_id`'s epoch `epoch` (1-based): epoch 1 keeps the id, so a split evaluated with
    one epoch, or its first epoch, is the same rows and rollouts as before epochs existed."""
    return str(sample_id) if epoch == 1 else f"{sample_id}#epoch{int(epoch)}"


def base_id(row_id: str) -> str:
    """The sample id of a prompt row id (`epoch_id`'s inverse)."""
    return _EPOCH.sub("", str(row_id))


def selection_hash(sample_ids: list[str]) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(sorted(set(map(str, sample_ids)))).encode("utf-8")).hexdigest()[:12]


def selected_key(model_key: str, sample_ids: list[str]) -> str:
    base, sep, experiment = model_key.partition("@")
    h = selection_hash(sample_ids)
    return f"{base}@{experiment}-ids-{h}" if sep and experiment else f"{base}@ids-{h}"


def _selection_file(h: str):
    from evalpipe.core.config import dagster_home

    return dagster_home() / "selections" / f"{h}.json"


def save_selection(sample_ids: list[str]) -> str:
    """Record the ids of a `--sample-id` try beside the instance (atomically); returns their hash."""
    import json
    import os
    import tempfile

    h = selection_hash(sample_ids)
    target = _selection_file(h)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(sorted(set(map(str, sample_ids))), fh)
    os.replace(tmp, target)
    return h


def selection_of(model_key: str) -> list[str] | None:
    """The sample ids a `<model>@ids-<h>` key evaluates; None for a key without the mark. A key whose ids were never
    recorded on this instance is a ConfigError (its samples cannot be known)."""
    m = _SELECTED.search(str(model_key))
    if not m:
        return None
    import json

    from evalpipe.core.errors import ConfigError

    path = _selection_file(m.group(1))
    try:
        return list(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        raise ConfigError(f"model key {model_key!r}: no sample selection {m.group(1)} recorded at {path}; run it with "
                          f"`evalpipe run --sample-id ID ...` (or evaluate(sample_ids=[...])) on this instance") from None


def is_adhoc(model_key: str) -> bool:
    return str(model_key).startswith(ADHOC_PREFIX)


def is_try_run(model_key: str) -> bool:
    """A throw-away key: ad-hoc (`adhoc:*`), `--limit` (`<model>@limit<N>`) or experiment (`<model>@<experiment>`).
    Pickers, charts and default comparisons leave these out unless asked (docs/viewer.md "Try runs")."""
    return is_adhoc(model_key) or "@" in str(model_key)


def looks_like_model_string(name: str) -> bool:
    """`provider/model` (litellm's form) rather than a config key."""
    return "/" in name


def adhoc_model(model: str, api_base: str | None = None, api_key_env: str | None = None,
                params: dict | None = None):
    """A temporary litellm model entry for `evalpipe run --model <string>`; the caller registers it for the
    instance (evalpipe/store/models_registry.py: this base module imports no storage)."""
    from evalpipe.core.config import ModelConfig

    key = ADHOC_PREFIX + sanitize_key(model)
    return ModelConfig(key=key, runner="litellm", model=model, api_base=api_base, api_key_env=api_key_env,
                       params=dict(params or {}),
                       description=f"ad-hoc model from `evalpipe run --model {model}` (not in the config file)")
