"""The Dagster instance of a project, opened by the Python API without touching the process environment."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def project_instance(project: Any, given: Any = None) -> Any:
    """`given`, else the instance of `project.home`. `eval_assets.launch.get_instance` (the CLI's) sets
    DAGSTER_HOME when it is unset; here it is used only when DAGSTER_HOME already names that home."""
    if given is not None:
        return given
    home = Path(project.home)
    if os.environ.get("DAGSTER_HOME") and Path(os.environ["DAGSTER_HOME"]).resolve() == home.resolve():
        from eval_assets.launch import get_instance

        return get_instance(project)
    from dagster import DagsterInstance

    home.mkdir(parents=True, exist_ok=True)
    return DagsterInstance.from_config(str(home))
