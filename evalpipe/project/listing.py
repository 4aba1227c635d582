"""What `evalpipe list` shows: each configured benchmark split (adapter, samples, metrics, description) and each
model, from a checked config, and a cache that lets a repeated `list` skip what it already knows (issue 31).

Checking a config imports pydantic's schema and every adapter, runner and metric (~0.3 s of a ~0.5 s start), and the
sample counts read the dataset files and the warehouse. The cache (one JSON file, its path given by the caller)
remembers, per fingerprint, that a config passed the check and the metric names of its splits; and, per file
identity, the samples each dataset holds. What a fingerprint covers:

- the check: the config file's bytes and path, evalpipe's own source files (path, size, mtime), the Python
  executable and version, the import path with each entry's mtime (installing or removing a package changes its
  folder's), and the EVALS_* environment. A config with `plugins:`, or a `sandbox:` backend probed at each check,
  or an installed package with `evalpipe.*` entry points is checked every time (their code or the machine can
  change under an unchanged fingerprint). A config that fails its check is never remembered, so its error is
  reported as before;
- a split's samples: its adapter and options, evalpipe's source files, and every file the count read (inode, size,
  mtime in ns; a folder: every file under it). A file modified in the last 2 s is counted but not remembered (a
  second write within the file system's timestamp granularity could keep the same identity);
- the warehouse's `datasets` counts: every `datasets` partition file (inode, size, mtime in ns), as the rollup
  keys them (evalpipe/store/rollup.py).

A cache that can't be read or written is only slower: the listing is computed as without one.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

RACY_S = 2.0  # a file modified this recently is not remembered
MAX_ENTRIES = 64  # per section of the cache file


# ---- fingerprints ----------------------------------------------------------------------------------------------------
def _stat_key(path: Path) -> list[Any] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def tree_identity(root: Path) -> list[Any]:
    """Every file under `root` (or `root` itself), as (relative path, inode, size, mtime in ns), sorted."""
    if root.is_file():
        return [["", *(_stat_key(root) or [])]]
    out = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            p = Path(folder, name)
            st = _stat_key(p)
            if st is not None:
                out.append([os.path.relpath(p, root), *st])
    return out


def _newest_mtime_ns(identity: list[Any]) -> int:
    return max((row[3] for row in identity if len(row) == 4), default=0)


_CODE: str | None = None


def code_identity() -> str:
    """evalpipe's own files (path, size, mtime): any edit of the code that checks or counts changes it."""
    global _CODE
    if _CODE is None:
        root = Path(__file__).resolve().parents[1]
        rows = []
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".pyc", ".pyo")):
                    continue
                try:
                    st = os.stat(os.path.join(folder, name))
                except OSError:
                    continue
                rows.append(f"{os.path.relpath(os.path.join(folder, name), root)}:{st.st_size}:{st.st_mtime_ns}")
        _CODE = hashlib.sha256("\n".join(rows).encode()).hexdigest()
    return _CODE


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, default=str, sort_keys=True).encode()).hexdigest()


def check_fingerprint(config_path: Path, text: bytes) -> str:
    """What the config check of `config_path` depends on (see the module's docstring)."""
    path_stats = []
    for entry in sys.path:
        try:
            path_stats.append([entry, os.stat(entry or ".").st_mtime_ns])
        except OSError:
            path_stats.append([entry, None])
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("EVALS_"))
    return _digest("check", str(config_path), hashlib.sha256(text).hexdigest(), code_identity(), sys.executable,
                   sys.version, path_stats, env)


def _checked_every_time(data: Any) -> bool:
    """A config whose check depends on more than the fingerprint covers: plugin modules, a probed sandbox."""
    if not isinstance(data, dict):
        return True
    return bool(data.get("plugins")) or data.get("sandbox") in ("bwrap", "docker")


# ---- the cache file --------------------------------------------------------------------------------------------------
class ListCache:
    """One JSON file: {"checked": {fingerprint: {"metrics": {split: [names]}}}, "samples": {key: n},
    "loaded": {key: {split: n}}}. Entries beyond MAX_ENTRIES per section are dropped oldest first."""

    def __init__(self, path: str | os.PathLike | None):
        self.path = Path(path) if path else None
        self.data: dict[str, dict[str, Any]] = {"checked": {}, "samples": {}, "loaded": {}}
        self.dirty = False
        if self.path is None:
            return
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            if isinstance(raw, dict):
                for section in self.data:
                    if isinstance(raw.get(section), dict):
                        self.data[section] = raw[section]
        except (OSError, ValueError):
            pass

    def get(self, section: str, key: str) -> Any:
        return self.data[section].get(key)

    def put(self, section: str, key: str, value: Any) -> None:
        entries = self.data[section]
        entries.pop(key, None)
        entries[key] = value
        while len(entries) > MAX_ENTRIES:
            entries.pop(next(iter(entries)))
        self.dirty = True

    def save(self) -> None:
        if self.path is None or not self.dirty:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.data), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            pass


# ---- the config, checked or known to have passed ---------------------------------------------------------------------
def _raw_yaml(text: bytes) -> Any:
    import yaml

    return yaml.load(text.decode("utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def checked_config(config_path: Path, cache: ListCache) -> tuple[Any, dict[str, list[str]] | None, str | None]:
    """(config, {split: metric names} when known from the cache, fingerprint to remember it under or None). The
    cache entry holds the data's digest too: what is parsed on a hit is what was checked.
    A config not known to have passed is loaded as every command loads it (the whole check; ConfigError on a
    mistake)."""
    from evalpipe.project.loader import load_config

    try:
        text = config_path.read_bytes()
        data = _raw_yaml(text)
    except Exception:  # not readable or not YAML: the full check words the error
        return load_config(config_path), None, None
    if _checked_every_time(data):
        return load_config(config_path), None, None
    fp = check_fingerprint(config_path, text)
    hit = cache.get("checked", fp)
    if isinstance(hit, dict) and isinstance(hit.get("metrics"), dict) and hit.get("data") == _data_digest(data):
        from evalpipe.project.loader import parse_config

        return parse_config(data or {}, config_path), hit["metrics"], None
    cfg = load_config(config_path)
    from evalpipe.project import plugins

    entry_points = any(not k.startswith("module:") for k in plugins.LOADED)
    try:  # what was checked is what was fingerprinted (not a file rewritten in between)
        same = config_path.read_bytes() == text
    except OSError:
        same = False
    # the check's YAML reader (line numbers, duplicate keys) and libyaml's, read here, must give the same data
    same = same and _data_digest(cfg.raw or {}) == _data_digest(data or {}) is not None
    return cfg, None, (fp if same and not entry_points else None)


def _data_digest(data: Any) -> str | None:
    try:
        return _digest("data", data)
    except (TypeError, ValueError):  # keys JSON can't sort (mixed types): not remembered
        return None


# ---- samples ---------------------------------------------------------------------------------------------------------
def _is_header_line(line: str) -> bool:
    from evalpipe.core.dataset_header import HEADER_KEY

    if HEADER_KEY not in line:
        return False
    try:
        obj = json.loads(line)
    except ValueError:
        return False
    return isinstance(obj, dict) and HEADER_KEY in obj


def _local_path(split: Any) -> Path | None:
    path = (split.options or {}).get("path")
    if isinstance(path, str) and not path.startswith(("hf://", "http")):
        return split.resolve(path) if hasattr(split, "resolve") else Path(path)
    return None


def count_samples(split: Any) -> int | None:
    """Samples in a split when known without downloading it: a local JSONL/CSV/Parquet file, or a local folder in
    an adapter's own layout (loaded through the adapter). None: not known here."""
    p = _local_path(split)
    if p is None:
        return None
    try:
        if p.is_dir():  # a local copy in an adapter's own layout (GAIA): load it, nothing is downloaded
            from evalpipe.benchmarks import adapter_for

            return len(list(adapter_for(split).load()))
        if p.is_file() and p.suffix == ".jsonl":
            with open(p, encoding="utf-8") as fh:
                lines = [line for line in fh if line.strip()]
            # a first line `{"__header__": ...}` is the dataset header (core/dataset_header.py), not a sample
            return len(lines) - (bool(lines) and _is_header_line(lines[0]))
        if p.is_file() and p.suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.ParquetFile(p).metadata.num_rows
        if p.is_file() and p.suffix == ".csv":
            import pandas as pd

            return len(pd.read_csv(p))
    except Exception:
        return None
    return None


def cached_count(split: Any, cache: ListCache) -> int | None:
    """count_samples, remembered by the identity of what it read (see the module's docstring)."""
    p = _local_path(split)
    if p is None or not p.exists():
        return count_samples(split)
    before = tree_identity(p)
    try:
        key = _digest("samples", split.adapter, split.key, split.options, split.metrics, str(p), before,
                      code_identity())
    except (TypeError, ValueError):  # options JSON can't key (mixed key types): counted, not remembered
        return count_samples(split)
    hit = cache.get("samples", key)
    if isinstance(hit, int) or (hit is None and key in cache.data["samples"]):
        return hit
    n = count_samples(split)
    if tree_identity(p) == before and time.time_ns() - _newest_mtime_ns(before) > RACY_S * 1e9:
        cache.put("samples", key, n)
    return n


def loaded_counts(warehouse: Any, cache: ListCache) -> dict[str, int]:
    """Samples of each split as loaded into the warehouse (`datasets`), remembered by its partition files."""
    if warehouse is None:
        return {}
    key = None
    if getattr(warehouse, "store", None) is None:  # a local warehouse: its files' identity keys the counts
        try:
            table_dir = Path(warehouse.table_dir("datasets"))
            before = tree_identity(table_dir) if table_dir.exists() else []
        except Exception:
            before = None
        if before is not None:
            key = _digest("loaded", str(getattr(warehouse, "duckdb_path", "")), before)
            hit = cache.get("loaded", key)
            if isinstance(hit, dict):
                return {str(k): int(v) for k, v in hit.items()}
            if not before:  # no dataset loaded yet
                return {}
    loaded: dict[str, int] = {}
    try:
        for r in warehouse.query("SELECT benchmark_split, count(*) AS n FROM datasets GROUP BY 1").itertuples():
            loaded[r.benchmark_split] = int(r.n)
    except Exception:
        return loaded
    if key is not None and tree_identity(table_dir) == before and \
            time.time_ns() - _newest_mtime_ns(before) > RACY_S * 1e9:
        cache.put("loaded", key, loaded)
    return loaded


# ---- the rows --------------------------------------------------------------------------------------------------------
def _metric_names(split: Any) -> list[str]:
    from evalpipe.benchmarks import adapter_for

    try:
        metrics = adapter_for(split).metrics()
    except Exception:
        metrics = split.metrics or []
    return [m if isinstance(m, str) else m.get("name", "?") for m in metrics]


def _benchmark_description(cfg: Any, name: str) -> str:
    raw = ((cfg.raw or {}).get("benchmarks") or {}).get(name) or {}
    return " ".join(str(raw.get("description") or "").split())


def list_rows(cfg: Any, warehouse: Any = None, cache: ListCache | None = None,
              metric_names: dict[str, list[str]] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of `evalpipe list`: (benchmark splits, models). `metric_names`: each split's, when known; else
    they are asked of the adapters and filled in, when a dict is given."""
    cache = cache if cache is not None else ListCache(None)
    known = dict(metric_names or {})
    loaded = loaded_counts(warehouse, cache)
    benches = []
    for key, s in cfg.splits.items():
        n = loaded.get(key)
        # counted first: asking an adapter for its metrics may fill in the split's options, which key the count
        samples = n if n is not None else cached_count(s, cache)
        names = known.get(key)
        if names is None:
            names = _metric_names(s)
            if metric_names is not None:
                metric_names[key] = names
        benches.append({"benchmark_split": key, "adapter": s.adapter, "samples": samples,
                        "metrics": ", ".join(names), "default": s.benchmark in cfg.default_benchmarks,
                        "description": _benchmark_description(cfg, s.benchmark)})
    models = [{"model": k, "runner": m.runner, "model_string": m.model, "default": k in cfg.default_models,
               "description": " ".join((m.description or "").split())} for k, m in cfg.models.items()]
    return benches, models


def listing(config_path: Path, warehouse: Any = None, cache_path: str | os.PathLike | None = None) \
        -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]:
    """(config, split rows, model rows) for `evalpipe list`, with the cache at `cache_path` (None: none)."""
    cache = ListCache(cache_path)
    cfg, metric_names, remember = checked_config(Path(config_path).expanduser().resolve(), cache)
    names: dict[str, list[str]] = dict(metric_names or {})
    benches, models = list_rows(cfg, warehouse, cache, names)
    if remember is not None:
        cache.put("checked", remember, {"metrics": names, "data": _data_digest(cfg.raw or {})})
    cache.save()
    return cfg, benches, models
