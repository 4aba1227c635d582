"""Failed steps' full tracebacks, redacted, in `<home>/logs/<run_id>.txt` (docs/operations.md#when-a-run-fails): the
one-line error a run prints names the file."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from evalpipe.core.config import dagster_home


def save_traceback(run_id: str, step: str | None, text: str, home: Any = None) -> str | None:
    """Keep a failed step's full traceback (redacted) in `<home>/logs/<run_id>.txt` (default home: the
    environment's); the run's event log in the UI has it too. Returns the path, or None if it can't be written
    (a full or read-only disk)."""
    from evalpipe.core.redact import redact

    try:
        folder = Path(home or dagster_home()) / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{run_id}.txt"
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(redact(f"run {run_id} step {step or '-'} failed:\n{text}\n"))
        return str(path)
    except OSError:
        return None
