"""The `process` backend: a plain subprocess under an audit hook. NOT a security boundary.

What it does: its own temporary folder as working directory, HOME and TMPDIR; rlimits (memory, CPU, file
size, processes); a network namespace when `unshare -rn` works (so connect() fails at the kernel); an audit
hook that refuses files outside its folder, starting processes, signals and loading outside native code.
Disk: no quota for the work folder (only RLIMIT_FSIZE, 64 MiB per file); a one-shot run's folder is on the
host's disk. What it does not: stop code written to escape it. Through ctypes, `_posixsubprocess`, `os.rename`/`os.link`
or `sqlite3`, code can write outside its folder, run programs, read the user's files and kill the evaluating
process. It exists for machines where neither bubblewrap nor Docker works, and logs a warning saying so.
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import sysconfig
from functools import lru_cache
from typing import Any

from evalpipe.sandbox.base import INNER, Sandbox, register_sandbox

log = logging.getLogger("evalpipe.sandbox")
WARNING = ("sandbox backend 'process' is NOT a security boundary: untrusted code can escape its audit hook "
           "(ctypes, _posixsubprocess, os.rename), read your files and kill this process. Install bubblewrap "
           "(apt-get install bubblewrap) or set `sandbox: bwrap|docker` in the config.")
_warned = False


@lru_cache(maxsize=1)
def namespaces_available() -> bool:
    """Whether `unshare -rn` (user + network namespace, no root needed) works on this machine."""
    exe = shutil.which("unshare")
    if not exe:
        return False
    try:
        return subprocess.run([exe, "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _read_ok() -> list[str]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            paths.add(p)
    # package folders a .pth file adds (a venv layered on another one): packages only, never a project folder
    paths.update(p for p in sys.path if os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages"))
    return sorted(paths)


@register_sandbox("process")
class ProcessSandbox(Sandbox):
    strength = 0

    def __init__(self, **kw):
        global _warned
        if not _warned:
            log.warning(WARNING)
            _warned = True
        super().__init__(**kw)
        self.workdir_inside = str(self.workdir)

    @classmethod
    def probe(cls) -> str | None:
        return None

    def env(self) -> dict[str, str]:
        return {**super().env(), "HOME": str(self.workdir), "TMPDIR": str(self.workdir)}

    def inner_script(self) -> str:
        return str(INNER)

    def inner_config(self, timeout_s):
        cfg = super().inner_config(timeout_s)
        cfg["limits"].pop("RLIMIT_NPROC", None)  # same uid as the caller: would count the caller's processes
        cfg["capture_dir"] = str(self._outer)  # session output files: beside the work folder, not in it
        cfg["guard"] = {"root": str(self.workdir), "read_ok": _read_ok() + [str(INNER)], "write_ok": [str(self._outer)],
                        "read_only": [str(self.workdir / n) for n in self.read_only], "block_network": True}
        return cfg

    def wrap(self, inner_argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, Any]]:
        if namespaces_available():
            inner_argv = [shutil.which("unshare") or "unshare", "-rn", *inner_argv]
        return inner_argv, {"env": env}
