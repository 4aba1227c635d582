"""The `docker` backend: one throwaway container per command (optional; used where Docker works).

`docker run --rm` with no network, a read-only root file system, all capabilities dropped,
no-new-privileges, an unprivileged user, cgroup limits on memory (no swap), processes and CPU, a private
size-capped /tmp, and the work folder as the only writable mount. The image (env `EVALS_SANDBOX_DOCKER_IMAGE`,
default `python:3.11-slim`) must already be on the machine (it is never pulled) and needs the packages the
code imports. Containers carry the label `evalpipe.sandbox=1`; a timeout removes the container
(`docker rm -f`), which kills everything in it.
"""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

from evalpipe.sandbox.base import INNER, INNER_IN_SANDBOX, Sandbox, register_sandbox

DEFAULT_IMAGE = "python:3.11-slim"
LABEL = "evalpipe.sandbox=1"


def image() -> str:
    return os.environ.get("EVALS_SANDBOX_DOCKER_IMAGE", DEFAULT_IMAGE)


def build_docker_argv(command: list[str], *, name: str, workdir: str, env: dict[str, str], image: str,
                      memory_mb: int, processes: int, tmp_mb: int, read_only_files: list[str] = (),
                      docker: str = "docker", uid: int = 65534, workdir_tmpfs_mb: int | None = None,
                      staged_files: list[str] = ()) -> list[str]:
    """The `docker run` command line (pure). `workdir_tmpfs_mb`: /sandbox is a tmpfs of that size (the disk
    quota) with the host's `staged_files` bound read-only into it, instead of the host folder bound writable."""
    argv = [docker, "run", "--rm", "-i", "--name", name, "--label", LABEL, "--network", "none", "--read-only",
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--user", f"{uid}:{uid}",
            "--memory", f"{int(memory_mb)}m", "--memory-swap", f"{int(memory_mb)}m",
            "--pids-limit", str(int(processes)), "--cpus", "1",
            "--tmpfs", f"/tmp:rw,nosuid,nodev,size={int(tmp_mb)}m,mode=1777"]
    if workdir_tmpfs_mb:
        argv += ["--tmpfs", f"/sandbox:rw,nosuid,nodev,size={int(workdir_tmpfs_mb)}m,mode=1777"]
        for rel in staged_files:
            argv += ["-v", f"{workdir.rstrip('/')}/{rel}:/sandbox/{rel}:ro"]
    else:
        argv += ["-v", f"{workdir}:/sandbox:rw"]
        for n in read_only_files:
            argv += ["-v", f"{workdir.rstrip('/')}/{n}:/sandbox/{n}:ro"]
    argv += ["-v", f"{INNER}:{INNER_IN_SANDBOX}:ro", "-w", "/sandbox"]
    for k, v in env.items():
        argv += ["-e", f"{k}={v}"]
    return argv + [image, *command]


@register_sandbox("docker")
class DockerSandbox(Sandbox):
    strength = 20
    workdir_inside = "/sandbox"

    def __init__(self, **kw):
        self.exe = shutil.which("docker") or "docker"
        self.names: dict[int, str] = {}
        super().__init__(**kw)

    @classmethod
    def probe(cls) -> str | None:
        return _probe(image())

    def prepare_workdir(self) -> None:
        os.chmod(self.workdir, 0o777)  # the container user (65534) writes here

    def prepare_path(self, path: Path) -> None:
        os.chmod(path, 0o666)

    def python(self) -> str:
        return "python"

    def inner_config(self, timeout_s):
        cfg = super().inner_config(timeout_s)
        cfg["limits"].pop("RLIMIT_NPROC", None)  # --pids-limit does it per container
        return cfg

    @property
    def quota_enforced(self) -> bool:
        return bool(self.ephemeral and self.limits.disk_mb)

    def wrap(self, inner_argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, Any]]:
        name = f"evalpipe-sandbox-{secrets.token_hex(6)}"
        self._last_name = name
        argv = build_docker_argv(inner_argv, name=name, workdir=str(self.workdir), env=env, image=image(),
                                 memory_mb=self.limits.memory_mb, processes=self.limits.processes,
                                 tmp_mb=self.limits.tmp_size_mb, read_only_files=self.read_only, docker=self.exe,
                                 workdir_tmpfs_mb=self.limits.disk_mb if self.quota_enforced else None,
                                 staged_files=self.staged_files() if self.quota_enforced else [])
        return argv, {}

    def spawn(self, inner_argv, **kw):
        proc = super().spawn(inner_argv, **kw)
        self.names[proc.pid] = self._last_name
        return proc

    def kill(self, proc) -> None:
        name = self.names.pop(proc.pid, None)
        if name:  # killing the client does not stop the container
            subprocess.run([self.exe, "rm", "-f", name], capture_output=True, timeout=30)
        super().kill(proc)


@lru_cache(maxsize=4)
def _probe(img: str) -> str | None:
    exe = shutil.which("docker")
    if not exe:
        return "docker is not installed"
    try:
        info = subprocess.run([exe, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=10)
        if info.returncode != 0:
            return f"the Docker daemon is not reachable ({(info.stderr.strip().splitlines() or ['?'])[-1]})"
        if subprocess.run([exe, "image", "inspect", img], capture_output=True, timeout=10).returncode != 0:
            return f"the image {img} is not on this machine (docker pull {img}, or set EVALS_SANDBOX_DOCKER_IMAGE)"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"docker does not answer: {exc}"
    return None
