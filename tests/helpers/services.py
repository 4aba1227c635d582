"""Throwaway local services for the tests that need real ones: redis-server and PostgreSQL, each on a free loopback
port in a temp folder, stopped on exit. Skips the test when the Debian package is not installed (.ci/run installs
both)."""
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


def free_port() -> int:
    """A loopback TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def redis_server() -> Iterator[str]:
    """A redis-server that keeps nothing on disk; yields its URL (database 0)."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (.ci/run installs it: apt-get install -y redis-server)")
    import redis

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="evalpipe-redis-") as folder:
        proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                 "--dir", folder], stdout=subprocess.DEVNULL)
        try:
            client = redis.Redis(port=port)
            for _ in range(200):
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(10)


@contextmanager
def postgres_server(database: str = "dagster") -> Iterator[str]:
    """A PostgreSQL server (trust auth, fsync off) with an empty `database`; yields its SQLAlchemy URL for psycopg2."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not bins:
        pytest.skip("PostgreSQL is not installed (.ci/run: apt-get install -y postgresql)")
    bindir = Path(bins[-1]).parent
    root = tempfile.mkdtemp(prefix="evalpipe-pg-")
    as_pg: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: run the server as the postgres user
        shutil.chown(root, "postgres", "postgres")
        as_pg = ["runuser", "-u", "postgres", "--"]
    data, port = f"{root}/data", free_port()
    try:
        subprocess.run(as_pg + [str(bindir / "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run(as_pg + [str(bindir / "pg_ctl"), "-D", data, "-l", f"{root}/log", "-w", "-o",
                                f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
                       check=True, stdout=subprocess.DEVNULL)
        import psycopg2

        con = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres")
        con.autocommit = True
        con.cursor().execute(f"CREATE DATABASE {database}")
        con.close()
        # SQLAlchemy 2.1 maps plain postgresql:// to psycopg 3; dagster-postgres ships with psycopg2
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/{database}"
    finally:
        if Path(data).exists():
            subprocess.run(as_pg + [str(bindir / "pg_ctl"), "-D", data, "-m", "fast", "-w", "stop"],
                           stdout=subprocess.DEVNULL)
        shutil.rmtree(root, ignore_errors=True)
