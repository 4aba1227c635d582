"""Process helpers shared by the storage, sandbox and entry layers (base layer: imports nothing of evalpipe)."""
from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def restore_environ(saved: dict[str, str | None]) -> None:
    """Put environment variables back as `{name: os.environ.get(name)}` recorded them (None: was unset)."""
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
