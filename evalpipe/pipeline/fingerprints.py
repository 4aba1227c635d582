"""Per-partition fingerprints of everything that can change a number, and dataset headers that pin them.

Six values per (benchmark_split, model) partition, all SHA-256 hex (64 characters) or null when not applicable.
They are recorded in the `rollouts` asset's metadata, in the `fingerprints` warehouse table and in the run
manifest (docs/reproducibility.md):

| name | what it hashes |
|---|---|
| `dataset_sha256` | the canonical content of the loaded samples (before `limit` and sharding), see `dataset_sha256` |
| `tool_registry_sha256` | the tool registry (`evalpipe.tools`), when it exposes one; else null |
| `tokenizer_fingerprint` | the dataset header's value, else the local model's tokenizer files; else null |
| `prompt_wrapper_sha256` | the bytes of the prompt wrapper file in use (or of the inline wrapper text); null: none |
| `runner_fingerprint` | runner kind, its answer-changing settings, and `prompt_wrapper_sha256` |
| `model_fingerprint` | model / checkpoint identity, decoding params and seed |

A dataset may carry a header (a first JSONL line `{"__header__": {...}}`, or a sidecar `<data file>.header.json`
for any format) with expected values; a partition whose loaded values disagree fails with one line naming each
difference, unless the split option `fail_on_fingerprint_mismatch` is false.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from evalpipe.core.dataset_header import HEADER_KEY
from evalpipe.core.errors import DataError
from evalpipe.core.fingerprint import canonical_json

HEADER_VERSION = 1
NAMES = ("dataset_sha256", "tool_registry_sha256", "tokenizer_fingerprint", "prompt_wrapper_sha256",
         "runner_fingerprint", "model_fingerprint")
# what a header may pin, and where it is checked: the dataset stage or the partition (rollouts) stage
HEADER_CHECKED = ("dataset_sha256", "tool_registry_sha256", "tokenizer_fingerprint")
FAIL_OPTION = "fail_on_fingerprint_mismatch"
# runner options that never change an answer (how fast, how often, how it is labelled): kept out of the fingerprint
NON_ANSWER_OPTIONS = frozenset({
    "concurrency", "timeout_s", "max_retries", "backoff_base_s", "backoff_max_s", "fail_fast", "rpm", "tpm",
    "max_connections", "fast_path", "experiment", "description", "prompt_wrapper", "rollout_shards", "warmup",
})


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_json(obj: Any) -> str:
    return sha256_bytes(canonical_json(obj).encode("utf-8"))


_FILE_CACHE: dict[tuple[str, int, int], str] = {}


def file_sha256(path: str | os.PathLike) -> str | None:
    """SHA-256 of a file's bytes (cached per path, size and mtime in this process); None if it is missing."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return None
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _FILE_CACHE:
        h = hashlib.sha256()
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        _FILE_CACHE[key] = h.hexdigest()
    return _FILE_CACHE[key]


# ---- the dataset ---------------------------------------------------------------------------------------------------
def canonical_sample(s: Any) -> dict[str, Any]:
    """The content of one loaded sample that the dataset fingerprint covers. Attachments count by file name and
    content (never by their absolute path, which differs between machines)."""
    return {
        "id": s.id, "input": s.input, "target": s.target, "choices": s.choices, "system": s.system,
        "files": [[Path(f).name, file_sha256(f)] for f in (s.files or [])],
        "metadata": s.metadata or {}, "tools": getattr(s, "tools", None), "messages": getattr(s, "messages", None),
    }


def dataset_sha256(samples: Iterable[Any]) -> str:
    """SHA-256 of the canonical JSON (sorted keys, no spaces, UTF-8) of the list of `canonical_sample` records
    ordered by sample id: the same samples in another order give the same value."""
    recs = sorted((canonical_sample(s) for s in samples), key=lambda r: str(r["id"]))
    return sha256_json(recs)


# ---- headers ---------------------------------------------------------------------------------------------------------
def make_header(samples: list[Any], *, tool_registry: str | None = None, tokenizer: str | None = None,
                gates: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A header for these samples (what `evalpipe dataset-header` prints)."""
    fps = {"dataset_sha256": dataset_sha256(samples)}
    if tool_registry:
        fps["tool_registry_sha256"] = tool_registry
    if tokenizer:
        fps["tokenizer_fingerprint"] = tokenizer
    body: dict[str, Any] = {"version": HEADER_VERSION, "fingerprints": fps}
    if gates:
        body["gates"] = gates
    body.update(extra)
    return {HEADER_KEY: body}


def fail_on_mismatch(options: Mapping[str, Any]) -> bool:
    v = options.get(FAIL_OPTION, True)
    if isinstance(v, str):
        return v.strip().lower() not in ("false", "0", "no", "off")
    return bool(v)


def diff(expected: Mapping[str, Any] | None, actual: Mapping[str, Any], names: Iterable[str]) -> list[tuple[str, Any, Any]]:
    """(name, expected, actual) for each pinned value that differs. A value the header does not pin, or one that
    cannot be computed here (null), is not compared."""
    if not expected:
        return []
    out = []
    for n in names:
        want, got = expected.get(n), actual.get(n)
        if want in (None, "") or got in (None, ""):
            continue
        if str(want) != str(got):
            out.append((n, want, got))
    return out


def _short(v: Any) -> str:
    s = str(v)
    return s[:12] if len(s) > 12 else s


def diff_line(where: str, diffs: list[tuple[str, Any, Any]], fix: bool = True) -> str:
    body = "; ".join(f"{n} header {_short(w)} != loaded {_short(g)}" for n, w, g in diffs)
    tail = (" (regenerate the header with `evalpipe dataset-header`, or run anyway with "
            "fail_on_fingerprint_mismatch: false / --no-fail-on-fingerprint-mismatch)") if fix else ""
    return f"fingerprint mismatch for {where}: {body}{tail}"


def check_header(where: str, header: Mapping[str, Any] | None, actual: Mapping[str, Any], names: Iterable[str],
                 options: Mapping[str, Any], warn: Any = None) -> list[tuple[str, Any, Any]]:
    """Raise DataError (one line) when the header disagrees, unless the option says not to; then `warn(line)`."""
    diffs = diff(header, actual, names)
    if diffs:
        if fail_on_mismatch(options):
            raise DataError(diff_line(where, diffs))
        if warn is not None:
            warn(diff_line(where, diffs, fix=False) + " (ignored: fail_on_fingerprint_mismatch is false)")
    return diffs


# ---- the other inputs -------------------------------------------------------------------------------------------------
def tool_registry_sha256(split: Any = None) -> str | None:
    """The tool registry's SHA-256, as `evalpipe.tools` exposes it (`tool_registry_sha256(split)` or
    `registry_sha256()`); None when there is no tool registry."""
    try:
        import evalpipe.tools as tools  # type: ignore[import-not-found]
    except ImportError:
        return None
    for name in ("tool_registry_sha256", "registry_sha256"):
        f = getattr(tools, name, None)
        if callable(f):
            try:
                return f(split) if split is not None else f()
            except TypeError:
                try:
                    return f()
                except Exception:
                    return None
            except Exception:
                return None
    v = getattr(tools, "TOOL_REGISTRY_SHA256", None)
    return v if isinstance(v, str) else None


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                   "tokenizer.model", "vocab.txt", "added_tokens.json")


def tokenizer_fingerprint(model: Any) -> str | None:
    """For `runner: local`: SHA-256 over the tokenizer files of a model folder, or over the tokenizer entries of a
    GGUF file's metadata. None for remote models (their tokenizer is not visible here)."""
    if getattr(model, "runner", None) != "local":
        return None
    try:
        from evalpipe.runners.local import resolve_checkpoint

        path = resolve_checkpoint(model.model)
    except Exception:
        return None
    if path.is_dir():
        files = [[n, file_sha256(path / n)] for n in TOKENIZER_FILES if (path / n).is_file()]
        return sha256_json(files) if files else None
    return _gguf_tokenizer_sha(path)


_GGUF_CACHE: dict[tuple[str, int, int], str | None] = {}


def _gguf_tokenizer_sha(path: Path) -> str | None:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key in _GGUF_CACHE:
        return _GGUF_CACHE[key]
    value = None
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        h = hashlib.sha256()
        for name in sorted(reader.fields):
            if not name.startswith("tokenizer."):
                continue
            field = reader.fields[name]
            h.update(name.encode())
            for i in field.data:
                h.update(memoryview(field.parts[i]).tobytes())
        value = h.hexdigest()
    except Exception:
        value = file_sha256(path)
    _GGUF_CACHE[key] = value
    return value


def runner_settings(model: Any) -> dict[str, Any]:
    return {k: v for k, v in sorted((model.options or {}).items()) if k not in NON_ANSWER_OPTIONS}


def runner_fingerprint(model: Any, wrapper_sha: str | None) -> str:
    return sha256_json({"runner": model.runner, "api_base": model.api_base, "settings": runner_settings(model),
                        "prompt_wrapper_sha256": wrapper_sha})


def base_model_key(key: str) -> str:
    """The model key without its `@<experiment>` suffix."""
    return key.split("@", 1)[0]


MODEL_IDENTITY_KEYS = ("model", "checkpoint", "agent", "version")  # what in a runner's identity names the model


def model_fingerprint(model: Any, identity: Mapping[str, Any] | None = None) -> str:
    """The model (its id, or a local checkpoint's file signature from the runner's identity), decoding params and
    seed; runner settings that are not the model (echo's reply mode, ...) belong to `runner_fingerprint`."""
    params = dict(model.params or {})
    ident = {k: identity[k] for k in MODEL_IDENTITY_KEYS if identity and k in identity}
    return sha256_json({"model": model.model or base_model_key(model.key), "identity": ident,
                        "params": params, "seed": params.get("seed")})


def partition_fingerprints(split: Any, model: Any, *, dataset_sha: str | None, identity: Mapping[str, Any] | None,
                           wrapper_sha: str | None, header: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The six values for one partition (`model` is the ModelConfig with this run's overrides applied)."""
    tok = (header or {}).get("tokenizer_fingerprint") or None
    computed_tok = tokenizer_fingerprint(model)
    return {
        "dataset_sha256": dataset_sha,
        "tool_registry_sha256": tool_registry_sha256(split),
        "tokenizer_fingerprint": computed_tok or tok,
        "prompt_wrapper_sha256": wrapper_sha,
        "runner_fingerprint": runner_fingerprint(model, wrapper_sha),
        "model_fingerprint": model_fingerprint(model, identity),
    }


def changes(previous: Mapping[str, Any] | None, current: Mapping[str, Any]) -> list[str]:
    """`name: old -> new` for each fingerprint that changed since the partition's last materialization."""
    if not previous:
        return []
    out = []
    for n in NAMES:
        a, b = previous.get(n), current.get(n)
        a = None if a is None or (isinstance(a, float) and a != a) else a
        if a != b:
            out.append(f"{n}: {_short(a)} -> {_short(b)}")
    return out


# ---- one partition (what the rollouts asset calls) ----------------------------------------------------------------------
def compute_for_partition(split: Any, model: Any, runner: Any, dataset_sha: str | None,
                          warn: Any = None) -> tuple[dict[str, Any], list[tuple[str, Any, Any]]]:
    """The partition's fingerprints, checked against the dataset header (tool registry, tokenizer) before any model
    call; raises DataError on a mismatch unless `fail_on_fingerprint_mismatch` is false."""
    from evalpipe.benchmarks import adapter_for
    from evalpipe.pipeline.prompt_wrappers import wrapper_for

    adapter = adapter_for(split)
    header = adapter.header() if hasattr(adapter, "header") else None
    wrapper = wrapper_for(split, model)
    fps = partition_fingerprints(split, model, dataset_sha=dataset_sha, identity=runner.identity(),
                                 wrapper_sha=wrapper.sha256 if wrapper is not None else None, header=header)
    mism = check_header(f"{split.key} x {model.key}", header, fps, ["tool_registry_sha256", "tokenizer_fingerprint"],
                        split.options, warn)
    return fps, mism


def judging_version(cfg: Any = None) -> str:
    """The `judgements` asset's code version: what decides verdicts in every split alike, i.e. the built-in metric
    code version (evalpipe/metrics/base.py). A Dagster code version is one per asset, so what differs per split
    (its metrics, their settings, its judges) is in `split_judging_version`, which enters each partition as the
    data version of the observable `metric_settings` asset (docs/reproducibility.md "Data versions"). `cfg` is
    accepted and unused (callers that passed the config keep working)."""
    from evalpipe.core.fingerprint import fingerprint
    from evalpipe.metrics.base import METRICS_CODE_VERSION

    return fingerprint({"code": METRICS_CODE_VERSION}, 16)


def _metric_names(specs: Any) -> Iterable[str | None]:
    for spec in specs if isinstance(specs, (list, tuple)) else [specs]:
        if isinstance(spec, str):
            yield spec
        elif isinstance(spec, Mapping):
            yield spec.get("name")
        else:
            yield None  # an object the config cannot name: counted as reading the judges (below)


def _reads_judges(specs: Iterable[Any]) -> bool:
    """Whether any of these metric entries may read the project's `judges:` (a model-graded metric, or one that
    takes the project's config); a metric that can't be looked up counts as reading them."""
    from evalpipe.metrics.base import get_metric

    for group in specs:
        for name in _metric_names(group):
            try:
                factory = get_metric(str(name))
            except Exception:
                return True
            if getattr(factory, "needs_judge", False) or getattr(factory, "takes_config", False):
                return True
    return False


def split_judging_version(cfg: Any, split_key: str) -> str:
    """What decides one split's verdicts besides its rollouts and the metric code: the split's metric list (as its
    adapter gives it) with their settings, its routes (`metrics_by_source`), and the judges (`judges:`) when one of
    its metrics may read them. Editing one benchmark's metric changes only its splits' values; a judge edited
    changes only the splits whose metrics are model-graded."""
    from evalpipe.benchmarks import adapter_for
    from evalpipe.core.fingerprint import fingerprint

    split = cfg.splits[split_key]
    try:
        metrics: Any = adapter_for(split).metrics()
    except Exception:  # an adapter that can't be built yet fails at materialization, with its own message
        metrics = split.metrics
    routes = split.options.get("metrics_by_source")
    body: dict[str, Any] = {"metrics": metrics}
    if routes:  # [routing] which sample each metric judges
        body["metrics_by_source"] = routes
        body["route_by"] = split.options.get("route_by") or "source"
    if _reads_judges([metrics, *(dict(routes).values() if isinstance(routes, Mapping) else [])]):
        body["judges"] = cfg.judges
    return fingerprint(body, 16)


def previous(wh: Any, split_key: str, model_key: str) -> dict[str, Any] | None:
    from evalpipe.core.errors import WarehouseError

    try:
        df = wh.read("fingerprints", {"benchmark_split": split_key, "model": model_key})
    except WarehouseError:
        return None
    return df.iloc[-1].to_dict() if len(df) else None


def record(wh: Any, split_key: str, model_key: str, fps: Mapping[str, Any],
           params: Mapping[str, Any] | None = None) -> None:
    import pandas as pd
    from datetime import datetime, timezone

    row = {"benchmark_split": split_key, "model": model_key, **{n: fps.get(n) for n in NAMES},
           "recorded_at": datetime.now(timezone.utc).isoformat(),
           "params": canonical_json(dict(params)) if params is not None else None}
    wh.write("fingerprints", pd.DataFrame([row]), {"benchmark_split": split_key, "model": model_key})
