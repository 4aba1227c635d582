"""Reading a tau2-bench data folder: `<path>/<domain>/{tasks.json, split_tasks.json, db.json, policy.md}` (telecom:
also `user_db.json`, the user's phone, and `tech_support_manual.md`, joined to the main policy as the official
environment joins them) and the
user simulator's guidelines (`<path>/user_simulator/simulation_guidelines*.md`), laid out as the official
repository's `data/tau2/domains/` (docs/benchmarks.md, tau2-bench)."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from evalpipe.core.errors import ConfigError, DataError

POLICY_FILES = ("policy.md", "main_policy.md")
TASK_FILES = ("tasks.json", "tasks_small.json")


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DataError(f"{path}: cannot read the file ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path} line {exc.lineno}: not valid JSON ({exc.msg})") from None


@lru_cache(maxsize=16)
def _load(folder: str, mtime: float) -> dict[str, Any]:
    root = Path(folder)
    tasks_file = next((root / f for f in TASK_FILES if (root / f).is_file()), None)
    if tasks_file is None:
        raise DataError(f"{root}: no {' or '.join(TASK_FILES)}; see docs/benchmarks.md (tau2-bench)")
    policy = next((root / f for f in POLICY_FILES if (root / f).is_file()), None)
    if policy is None:
        raise DataError(f"{root}: no {' or '.join(POLICY_FILES)}")
    if not (root / "db.json").is_file():
        how = (" (the official db.toml and user_db.toml are written as db.json and user_db.json by "
               "scripts/tau2_official_verdicts.py telecom-db)" if (root / "db.toml").is_file() else "")
        raise DataError(f"{root}: no db.json (the domain database){how}")
    policy_text = policy.read_text(encoding="utf-8")
    if (root / "tech_support_manual.md").is_file():  # telecom: the main policy and the tech-support manual
        policy_text = (f"<main_policy>\n{policy_text}\n</main_policy>\n<tech_support_policy>\n"
                       f"{(root / 'tech_support_manual.md').read_text(encoding='utf-8')}\n</tech_support_policy>")
    tasks = _json(tasks_file)
    if not isinstance(tasks, list):
        raise DataError(f"{tasks_file}: expected a JSON array of tasks")
    splits = _json(root / "split_tasks.json") if (root / "split_tasks.json").is_file() else {}
    user_db = _json(root / "user_db.json") if (root / "user_db.json").is_file() else None
    return {"tasks": tasks, "splits": splits, "policy": policy_text, "db": _json(root / "db.json"),
            "user_db": user_db, "tasks_file": str(tasks_file)}


def load_domain(path: Path, domain: str) -> dict[str, Any]:
    folder = path / domain
    if not folder.is_dir():
        raise ConfigError(f"tau2: no folder {folder} for domain {domain!r}; 'path:' names the folder holding "
                          f"one folder per domain (as the official data/tau2/domains)")
    return _load(str(folder), folder.stat().st_mtime)


def guidelines(path: Path, with_tools: bool) -> str:
    """The official user-simulator guidelines, looked for beside the domains (`user_simulator/`) and one above."""
    name = "simulation_guidelines_tools.md" if with_tools else "simulation_guidelines.md"
    for folder in (path / "user_simulator", path.parent / "user_simulator"):
        if (folder / name).is_file():
            return (folder / name).read_text(encoding="utf-8")
    raise DataError(f"tau2: {name} not found under {path / 'user_simulator'}; copy it from the official "
                    f"data/tau2/user_simulator/")
