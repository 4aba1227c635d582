"""The `bwrap` backend: bubblewrap (Debian/Ubuntu package `bubblewrap`), an OS-level boundary.

Inside: a read-only view of the system (`/usr` and its `/bin`, `/lib*` links, a few files of `/etc`), the
Python installation and the venv (read-only, nothing else of the project), a private `/tmp` (tmpfs, size
capped), fresh `/dev` and `/proc` (its own PID namespace: the code sees only its own processes), and its work
folder at `/sandbox`, the only writable place. `--unshare-all`: no network (its own network namespace, with
only its own loopback), no IPC, its own hostname. `--clearenv`: none of the caller's environment. When the
caller is root the code runs as a random unprivileged uid (see `_inner.py`), so it has no capabilities and
RLIMIT_NPROC applies. A timeout kills bwrap; its PID namespace dies with it, and every descendant with that,
`setsid` ones included (`--die-with-parent` covers the caller dying).
"""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import sysconfig
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

from evalpipe.sandbox.base import INNER, INNER_IN_SANDBOX, Sandbox, SandboxUnavailable, register_sandbox

WORKDIR = "/sandbox"
SYSTEM_DIRS = ("/usr",)
ROOT_ENTRIES = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # links into /usr, or real folders
ETC_ENTRIES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime",
               "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/mime.types", "/etc/fonts",
               "/etc/os-release", "/etc/debian_version", "/etc/bash.bashrc", "/etc/inputrc")


def build_bwrap_argv(command: Sequence[str], *, workdir: str, env: dict[str, str],
                     ro_paths: Iterable[str] = (), symlinks: Iterable[tuple[str, str]] = (),
                     read_only_files: Iterable[str] = (), inner_script: str | None = None,
                     tmp_mb: int | None = 256, workdir_inside: str = WORKDIR, as_root: bool = False,
                     bwrap: str = "bwrap", workdir_tmpfs_mb: int | None = None,
                     staged_files: Iterable[str] = ()) -> list[str]:
    """The bwrap command line that runs `command` (pure: no file system access, unit-tested).

    `ro_paths`: host paths bound read-only at the same place; `symlinks`: (target, link) pairs;
    `workdir`: the host folder bound writable at `workdir_inside`; `read_only_files`: names inside it bound
    read-only over themselves; `env`: the whole environment inside. `workdir_tmpfs_mb`: the work folder is
    instead a fresh tmpfs of that size (the disk quota; it lives as long as this command), and the host's
    `staged_files` (relative paths in `workdir`) are bound read-only into it (they don't count against it).

    `as_root`: the caller is root. Then `--unshare-all` would map root to root inside a user namespace, where
    it keeps the capabilities to remount the read-only binds writable (measured: it can write to the host's
    folders). So a root caller gets every namespace but the user one, all capabilities dropped except
    CAP_SETUID/CAP_SETGID/CAP_SETPCAP, which `_inner.py` uses at once to empty its capability bounding set and
    become an unprivileged uid (losing those too).
    """
    if as_root:
        ns = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
              "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    else:
        ns = ["--unshare-all"]  # user namespace included; bwrap drops every capability before the command
    argv = [bwrap, *ns, "--die-with-parent", "--new-session", "--clearenv", "--hostname", "sandbox"]
    # /tmp first: a Python or venv that lives under /tmp (a CI checkout) is bound on top of it, not hidden by it
    argv += ["--perms", "1777"] + (["--size", str(int(tmp_mb) * 1024 * 1024)] if tmp_mb else []) + ["--tmpfs", "/tmp"]
    ro_paths = list(ro_paths)
    parents: list[str] = []  # folders above a bind (e.g. /root above a pyenv Python): empty, traversable
    for path in ro_paths:
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            parent = "/" + "/".join(parts[:i])
            if parent not in parents and parent not in ro_paths and parent != "/tmp":
                parents.append(parent)
    for parent in parents:
        argv += ["--perms", "0755", "--dir", parent]
    for path in ro_paths:
        argv += ["--ro-bind", path, path]
    for target, link in symlinks:
        argv += ["--symlink", target, link]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    # /dev/shm writable (multiprocessing's semaphores), small
    argv += ["--perms", "1777"] + (["--size", str(64 * 1024 * 1024)] if tmp_mb else []) + ["--tmpfs", "/dev/shm"]
    for name in read_only_files:
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"read-only file names are plain names inside the work folder, got {name!r}")
    if workdir_tmpfs_mb:
        argv += ["--perms", "1777", "--size", str(int(workdir_tmpfs_mb) * 1024 * 1024), "--tmpfs", workdir_inside]
        for rel in staged_files:
            if rel.startswith("/") or ".." in rel.split("/") or rel in ("", "."):
                raise ValueError(f"staged files are relative paths inside the work folder, got {rel!r}")
            argv += ["--ro-bind", f"{workdir.rstrip('/')}/{rel}", f"{workdir_inside}/{rel}"]
    else:
        argv += ["--bind", workdir, workdir_inside]
        for name in read_only_files:
            argv += ["--ro-bind", f"{workdir.rstrip('/')}/{name}", f"{workdir_inside}/{name}"]
    if inner_script:
        argv += ["--ro-bind", inner_script, INNER_IN_SANDBOX]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    argv += ["--chdir", workdir_inside, "--", *command]
    return argv


def _under(path: str, parents: Iterable[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


def python_paths() -> list[str]:
    """The Python installation and the venv (read-only inside), without the project or home around them."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            paths.add(p)
    # package folders a .pth file adds (a venv layered on another one): packages only, never a project folder
    paths.update(p for p in sys.path if os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages"))
    real = sorted({os.path.realpath(p) for p in paths if os.path.isdir(p)} | {p for p in paths if os.path.isdir(p)})
    keep: list[str] = []
    for p in sorted(real, key=len):  # drop paths inside an already-bound one
        if not _under(p, keep) and not _under(p, SYSTEM_DIRS):
            keep.append(p)
    return keep


@lru_cache(maxsize=1)
def host_layout() -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """(read-only paths, symlinks) describing this machine's system for build_bwrap_argv."""
    ro: list[str] = [d for d in SYSTEM_DIRS if os.path.isdir(d)]
    links: list[tuple[str, str]] = []
    for entry in ROOT_ENTRIES:
        if os.path.islink(entry):
            links.append((os.readlink(entry), entry))
        elif os.path.isdir(entry):
            ro.append(entry)
    ro += [e for e in ETC_ENTRIES if os.path.exists(e)]
    ro += python_paths()
    return tuple(ro), tuple(links)


@lru_cache(maxsize=1)
def _tmp_size_supported(exe: str) -> bool:
    try:
        return "--size" in subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False


@register_sandbox("bwrap")
class BwrapSandbox(Sandbox):
    strength = 30
    workdir_inside = WORKDIR

    def __init__(self, **kw):
        self.exe = shutil.which("bwrap") or "bwrap"
        # root outside: run the code as a fresh unprivileged uid (no capabilities, RLIMIT_NPROC enforced)
        self.uid = 100_000 + secrets.randbelow(900_000) if os.geteuid() == 0 else None
        super().__init__(**kw)

    @classmethod
    def probe(cls) -> str | None:
        return _probe()

    def prepare_workdir(self) -> None:
        if self.uid is not None:
            os.chown(self.workdir, self.uid, self.uid)
        os.chmod(self.workdir, 0o711)  # bwrap started by root has to chdir into it without DAC override

    def prepare_path(self, path: Path) -> None:
        if self.uid is not None:
            os.chown(path, self.uid, self.uid)

    def inner_config(self, timeout_s):
        cfg = super().inner_config(timeout_s)
        if self.uid is not None:
            cfg["uid"] = self.uid
        return cfg

    @property
    def quota_enforced(self) -> bool:
        return bool(self.ephemeral and self.limits.disk_mb)

    def wrap(self, inner_argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, Any]]:
        ro, links = host_layout()
        sized = _tmp_size_supported(self.exe)
        if self.quota_enforced and not sized:
            raise SandboxUnavailable(f"{self.exe} has no --size option, so the work folder's disk quota "
                                     f"({self.limits.disk_mb} MB) can't be enforced; install bubblewrap >= 0.5 "
                                     "or set the quota to 0 (sandbox_disk_mb: 0, or the metric's disk_mb: 0)")
        argv = build_bwrap_argv(inner_argv, workdir=str(self.workdir), env=env, ro_paths=ro, symlinks=links,
                                read_only_files=self.read_only, inner_script=str(INNER),
                                tmp_mb=self.limits.tmp_size_mb if sized else None,
                                as_root=self.uid is not None, bwrap=self.exe,
                                workdir_tmpfs_mb=self.limits.disk_mb if self.quota_enforced else None,
                                staged_files=self.staged_files() if self.quota_enforced else ())
        return argv, {}


_USABLE = False  # once bwrap has worked here it is taken as usable; a failed probe is never cached


def _probe() -> str | None:
    """Why bwrap can't run here, or None. A failure is probed again (and once more right away): caching a
    transient failure (a busy machine, a full process table) would quietly weaken every later run to `process`."""
    global _USABLE
    if _USABLE:
        return None
    why = _probe_once()
    if why is not None and shutil.which("bwrap"):
        why = _probe_once()
    _USABLE = why is None
    return why


def _probe_once() -> str | None:
    exe = shutil.which("bwrap")
    if not exe:
        return "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"
    try:
        with BwrapSandbox() as sb:
            r = sb.exec(sb.python_argv("exec", "true"), timeout_s=30)
    except OSError as exc:
        return f"bwrap cannot start: {exc}"
    if r.status != "passed":
        why = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        return (f"bwrap cannot create its namespaces here ({why}); unprivileged user namespaces may be off "
                "(sysctl kernel.unprivileged_userns_clone=1) or a container's seccomp profile blocks them")
    return None
