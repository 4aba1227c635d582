"""Forgetting a model (`evalpipe forget`, the `forget_model` job): every place a model key left something.

    plans = plan_forget(["adhoc:echo"], home=..., warehouse=..., artifacts_root=..., instance=...)
    check_forget(plans, configured=set(cfg.models), force=False)   # unknown or configured keys: ConfigError
    for plan in plans: print("\n".join(plan.describe()))           # the dry run
    forget(plans, warehouse=..., instance=..., rebuild_leaderboard=build_leaderboard)

What goes, per model key (narrowed to some benchmark splits with `splits`):
- its warehouse partitions: every table partitioned by model loses the model's files whole; a table not
  partitioned by model (the leaderboard) is rewritten without its rows (rebuilt from the remaining metrics when
  the caller hands `rebuild_leaderboard`, so the other models' ranks close up);
- its rollout (and any other) journals under `<home>/journal/`, set-aside copies included;
- its run artifact folders `<artifacts>/<benchmark>/<split>/<model>/` (every run and `latest`);
- its partition-lock files under `<home>/locks/` (refused while a run holds one: forgetting under a running
  partition would leave half of it);
- not narrowed by split: its key in the instance's `model` dimension, and its discovered-models registry entry
  (`<home>/models/`) once no remaining key shares its base (`adhoc:x` serves `adhoc:x@limit5` too).

The locations come from the caller (a Project's home, warehouse and artifacts root): this floor knows no project.
Dagster's event log keeps the runs and materialization records (OSS storages can't wipe partitions of a multi-
partitioned asset); with the key gone they no longer show in the asset graph.
"""
from __future__ import annotations

import fcntl
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence
from urllib.parse import quote, unquote

import pyarrow.parquet as pq

from evalpipe.core.errors import ConfigError, RunFailed
from evalpipe.core.schema import PARTITION_COLUMNS, TABLES
from evalpipe.store.artifacts import partition_dir
from evalpipe.store.models_registry import registry_file
from evalpipe.store.partition_lock import holder
from evalpipe.store.warehouse import Warehouse

SPLIT, MODEL = PARTITION_COLUMNS  # the dimensions' names (the `model` dynamic partitions too)
MODEL_TABLES = tuple(t for t, schema in TABLES.items() if MODEL in schema.names)
JOURNAL_SUFFIXES = ("", "-wal", "-shm", "-journal", ".lock")  # SQLite's companions and the set-aside lock
REVIEWS = "reviews"  # append-only, one file per review (benchmark_split, review_id): a model's reviews go file by file
SPLIT_FITS = ("review_ranking",)  # one fit over every model of a split: the split's rows go, refit by `reviews`


@dataclass
class ModelPlan:
    """What forgetting one model key removes (all lists empty and no key: nothing is known of it)."""

    model: str
    splits: tuple[str, ...] = ()  # narrowed to these benchmark splits; () = every split
    partition_key: bool = False  # the key is in the instance's `model` dimension and goes
    files: list[tuple[str, dict[str, str], int]] = field(default_factory=list)  # (table, partition, rows): deleted
    rewritten: dict[str, int] = field(default_factory=dict)  # table not partitioned by model -> its rows that go
    journals: list[Path] = field(default_factory=list)
    artifacts: list[Path] = field(default_factory=list)  # partition folders (every run in them)
    locks: list[Path] = field(default_factory=list)
    registry: Path | None = None  # the discovered-models entry that goes

    @property
    def rows(self) -> dict[str, int]:
        """Rows that go, per warehouse table (tables with none left out)."""
        out: dict[str, int] = {}
        for table, _, n in self.files:
            out[table] = out.get(table, 0) + n
        for table, n in self.rewritten.items():
            out[table] = out.get(table, 0) + n
        return {t: out[t] for t in TABLES if t in out}

    @property
    def found(self) -> bool:
        return bool(self.partition_key or self.files or self.rewritten or self.journals or self.artifacts
                    or self.locks or self.registry)

    def describe(self) -> list[str]:
        """What goes, one line per place, for the dry run and the confirmation."""
        where = f" (splits: {', '.join(self.splits)})" if self.splits else ""
        lines = [f"model {self.model}{where}:"]
        if self.partition_key:
            lines.append(f"  partition key: {self.model} (the instance's `{MODEL}` dimension)")
        rows = self.rows
        if rows:
            lines.append("  warehouse rows: " + ", ".join(f"{t} {n}" for t, n in rows.items()))
            splits = sorted({p[SPLIT] for _, p, _ in self.files if SPLIT in p})
            if splits:
                lines.append(f"  warehouse partitions: {len(self.files)} file(s) of split(s) {', '.join(splits)}")
            for table in self.rewritten:
                lines.append(f"  {table}: " + ("its splits' rankings go (the `reviews` asset refits them without it)"
                                               if table in SPLIT_FITS else "rewritten without this model's rows"))
            if REVIEWS in rows:
                lines.append(f"  reviews: {rows[REVIEWS]} (verdicts on its answers, preferences with it on either side)")
        for label, paths in (("journals", self.journals), ("artifact folders", self.artifacts),
                             ("partition locks", self.locks)):
            if paths:
                lines.append(f"  {label}:")
                lines += [f"    {p}" + (f" ({_runs(p)} run(s))" if label == "artifact folders" else "") for p in paths]
        if self.registry:
            lines.append(f"  registry entry: {self.registry}")
        if len(lines) == 1:
            lines.append("  nothing")
        return lines

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "splits": list(self.splits), "partition_key": self.partition_key,
                "rows": self.rows, "partitions": [{"table": t, **p, "rows": n} for t, p, n in self.files],
                "rewritten": dict(self.rewritten), "journals": [str(p) for p in self.journals],
                "artifacts": [str(p) for p in self.artifacts], "locks": [str(p) for p in self.locks],
                "registry": str(self.registry) if self.registry else None}


def _runs(folder: Path) -> int:
    try:
        return sum(1 for p in folder.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))
    except OSError:
        return 0


def _base(key: str) -> str:
    return key.split("@", 1)[0]  # `<model>@limit5`, `<model>@<experiment>`: tries of one model


def _keyed_files(root: Path, model: str, splits: Sequence[str], names: Callable[[str, str], bool]) -> list[Path]:
    """Files `<root>/<kind>/<quoted split>/<file>` of a model (journals, locks), `names(file name, quoted model)`
    saying which are its."""
    quoted = quote(model, safe="")
    out = []
    for kind in sorted(root.iterdir()) if root.is_dir() else []:
        for split_dir in sorted(kind.iterdir()) if kind.is_dir() else []:
            if not split_dir.is_dir() or (splits and unquote(split_dir.name) not in splits):
                continue
            out += [f for f in sorted(split_dir.iterdir()) if f.is_file() and names(f.name, quoted)]
    return out


def _is_journal(name: str, quoted: str) -> bool:
    base = f"{quoted}.sqlite"
    return name in {base + s for s in JOURNAL_SUFFIXES} or name.startswith(base + ".malformed-")


def _is_lock(name: str, quoted: str) -> bool:
    return name == f"{quoted}.lock"


def plan_forget(models: Iterable[str], *, home: Path, warehouse: Warehouse, artifacts_root: Path, instance: Any,
                splits: Sequence[str] = ()) -> list[ModelPlan]:
    """What forgetting each model key would remove; nothing is touched."""
    models = list(dict.fromkeys(models))
    splits = tuple(dict.fromkeys(splits))
    partition_keys = set(instance.get_dynamic_partitions(MODEL)) if instance is not None else set()
    remaining = partition_keys - set(models)  # (narrowed by split, no key goes: the registry stays, too)
    plans = []
    for model in models:
        plan = ModelPlan(model, splits)
        for table in MODEL_TABLES:
            if table == REVIEWS:
                plan.files += _reviews_of(warehouse, model, splits)
                continue
            for part in warehouse.partitions(table):
                if part.get(MODEL) != model or (splits and part.get(SPLIT) not in splits):
                    continue
                path = warehouse.partition_file(table, part)
                plan.files.append((table, part, warehouse.reader(table, part).num_rows if warehouse.store
                                   else pq.read_metadata(path).num_rows))
            whole = warehouse.partition_file(table, {})  # a table not partitioned by model: its rows of this model
            if whole.exists():
                df = warehouse.read(table, {}, columns=[SPLIT, MODEL])
                n = int(_gone(table, df, model, splits).sum())
                if n:
                    plan.rewritten[table] = n
        plan.journals = _keyed_files(home / "journal", model, splits, _is_journal)
        plan.locks = _keyed_files(home / "locks", model, splits, _is_lock)
        folders = ([partition_dir(artifacts_root, s, model) for s in splits] if splits
                   else sorted(artifacts_root.glob(f"*/*/{glob_escape(model.replace('/', '__'))}")))
        plan.artifacts = [f for f in folders if f.is_dir()]
        if not splits:
            plan.partition_key = model in partition_keys
            entry = registry_file(_base(model), home)
            if entry.exists() and not any(_base(k) == _base(model) for k in remaining):
                plan.registry = entry
        plans.append(plan)
    return plans


def _reviews_of(warehouse: Warehouse, model: str, splits: Sequence[str]) -> list[tuple[str, dict[str, str], int]]:
    """The review files of a model: verdicts on its answers and preferences with it on either side (a judge's own
    preferences, reviewer = the judge's key, stay: forgetting a model under test does not forget a judge)."""
    if not warehouse.partitions(REVIEWS):
        return []
    df = warehouse.query(f"SELECT {SPLIT}, review_id FROM reviews WHERE ({MODEL} = ? OR model_b = ?) ORDER BY 1, 2",
                         [model, model])
    return [(REVIEWS, {SPLIT: s, "review_id": r}, 1) for s, r in zip(df[SPLIT], df["review_id"])
            if not splits or s in splits]


def _gone(table: str, df: Any, model: str, splits: Sequence[str]) -> Any:
    """The rows of a table not partitioned by model that go with `model`: its own rows, or for a fit over every
    model of a split (SPLIT_FITS) every row of the splits it is in."""
    mine = (df[MODEL] == model) & (df[SPLIT].isin(splits) if splits else True)
    return df[SPLIT].isin(set(df.loc[mine, SPLIT])) if table in SPLIT_FITS else mine


def glob_escape(text: str) -> str:
    """`text` matched literally by Path.glob (a model key may hold `[`, `*` or `?`)."""
    return "".join(f"[{c}]" if c in "[*?" else c for c in text)


def check_forget(plans: Sequence[ModelPlan], configured: Iterable[str] = (), force: bool = False,
                 known: Iterable[str] = ()) -> None:
    """Refuse (ConfigError, one line) a key nothing is known of, and a key of the config file (unless `force`):
    the config-sync sensor would add it back at its next tick. Narrowed to splits, a configured key stays (only
    its results there go), so it needs no `force`."""
    unknown = [p.model for p in plans if not p.found]
    if unknown:
        where = f" in split(s) {', '.join(plans[0].splits)}" if plans and plans[0].splits else ""
        have = sorted(known)
        raise ConfigError(f"unknown model key(s) {', '.join(unknown)}{where}: nothing to forget"
                          + (f"; known: {', '.join(have)}" if have else "")
                          + " (evalpipe list models shows the configured ones)")
    configured = set(configured)
    kept = [p.model for p in plans if p.model in configured and not p.splits]
    if kept and not force:
        raise ConfigError(f"{', '.join(kept)} is in the config file's models: the next config sync adds it back; "
                          "remove it from the config first, or pass --force to delete its results anyway")


def _hold_locks(plans: Sequence[ModelPlan]) -> list[Any]:
    """Take every partition lock of the plans without waiting; a held one means a run of it is going on."""
    held = []
    try:
        for path in (p for plan in plans for p in plan.locks):
            fh = open(path, "a+")
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.close()
                raise RunFailed(f"{path.parent.parent.name} of {unquote(path.parent.name)}|{unquote(path.stem)} is "
                                f"running in {holder(path)}; let it finish (or stop it), then forget") from None
            held.append(fh)
    except BaseException:
        for fh in held:
            fh.close()
        raise
    return held


def forget(plans: Sequence[ModelPlan], *, warehouse: Warehouse, instance: Any,
           rebuild_leaderboard: Callable[[Any], Any] | None = None) -> None:
    """Remove what the plans list. The partition key goes last, so a forget stopped half way is simply run again."""
    held = _hold_locks(plans)
    try:
        for plan in plans:
            for table, part, _ in plan.files:
                warehouse.delete(table, part)
        for table in dict.fromkeys(t for plan in plans for t in plan.rewritten):
            if table == "leaderboard" and rebuild_leaderboard is not None:  # ranks recomputed without them
                warehouse.write(table, rebuild_leaderboard(warehouse.read_table("metrics")), {})
                continue
            df = warehouse.read(table, {})
            gone = False
            for plan in plans:
                gone = gone | _gone(table, df, plan.model, plan.splits)
            warehouse.write(table, df[~gone].reset_index(drop=True), {})
        for plan in plans:
            for path in plan.journals:
                path.unlink(missing_ok=True)
            for folder in plan.artifacts:
                shutil.rmtree(folder)
                _remove_empty_parents(folder)
            if plan.registry is not None:
                plan.registry.unlink(missing_ok=True)
            for path in plan.locks:
                path.unlink(missing_ok=True)
        for plan in plans:
            if plan.partition_key and instance is not None:
                instance.delete_dynamic_partition(MODEL, plan.model)
    finally:
        for fh in held:
            fh.close()


def _remove_empty_parents(folder: Path) -> None:
    """The <benchmark>/<split> levels above a removed artifact folder, once empty (`artifacts.partition_dir`)."""
    for level in (folder.parent, folder.parent.parent):
        try:
            level.rmdir()
        except OSError:  # another model's folders (or the root itself, not empty) stay
            return
