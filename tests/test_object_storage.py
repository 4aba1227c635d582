"""The warehouse on object storage: a real S3-compatible server (moto's server mode) on 127.0.0.1."""
import socket
import subprocess
import sys
import time

import pandas as pd
import pytest

from evalpipe.core.errors import WarehouseError
from evalpipe.store.warehouse import Warehouse

BUCKET = "evals-warehouse"


@pytest.fixture(scope="module")
def s3_endpoint():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto server did not start")
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}"
        import boto3

        boto3.client("s3", endpoint_url=url, aws_access_key_id="testing-key-id",
                     aws_secret_access_key="testing-secret-value", region_name="us-east-1").create_bucket(Bucket=BUCKET)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _options(url):
    return {"key": "testing-key-id", "secret": "testing-secret-value",
            "client_kwargs": {"endpoint_url": url, "region_name": "us-east-1"}}


@pytest.fixture
def s3_config(s3_endpoint, write_config, home, monkeypatch, tmp_path):
    """The test config plus `warehouse: {uri, storage_options}` pointing at the moto server, under a fresh prefix."""
    from pathlib import Path

    monkeypatch.delenv("EVALS_WAREHOUSE_URI", raising=False)
    base = (Path(__file__).parent / "fixtures" / "evals.test.yaml").read_text()
    prefix = f"s3://{BUCKET}/{tmp_path.name}"
    o = _options(s3_endpoint)
    write_config(base + f"\nwarehouse:\n  uri: {prefix}\n  storage_options:\n    key: {o['key']}\n"
                 f"    secret: {o['secret']}\n    client_kwargs:\n      endpoint_url: {s3_endpoint}\n"
                 f"      region_name: us-east-1\n")
    return prefix


def _objects(url, prefix):
    import s3fs

    fs = s3fs.S3FileSystem(**_options(url))
    return sorted(p[len(prefix) - len("s3://"):].lstrip("/") for p in fs.find(prefix[len("s3://"):]))


def test_partitions_are_objects_and_the_views_read_them(s3_endpoint, s3_config, home):
    wh = Warehouse(home / "warehouse.duckdb")
    assert wh.store is not None and wh.store.uri == s3_config
    rows = lambda model, n: pd.DataFrame({"benchmark_split": "smoke/test", "model": model,  # noqa: E731
                                          "sample_id": [f"s{i}" for i in range(n)], "prediction": "x",
                                          "status": "ok", "latency_s": 0.5})
    uri = wh.write("rollouts", rows("perfect", 3), {"benchmark_split": "smoke/test", "model": "perfect"})
    assert uri == f"{s3_config}/rollouts/benchmark_split=smoke%2Ftest/model=perfect/part.parquet"
    wh.write("rollouts", rows("parrot", 2), {"benchmark_split": "smoke/test", "model": "parrot"})
    wh.write("rollouts", rows("parrot", 4), {"benchmark_split": "smoke/test", "model": "parrot"})  # replaces

    keys = _objects(s3_endpoint, s3_config)
    assert "rollouts/benchmark_split=smoke%2Ftest/model=parrot/part.parquet" in keys
    assert "rollouts/_schema/part.parquet" in keys and not any(k.endswith(".tmp") for k in keys)
    assert not (home / "warehouse").exists()  # nothing went to local disk

    got = wh.query("select model, count(*) n from rollouts group by model order by model")
    assert got.to_dict("records") == [{"model": "parrot", "n": 4}, {"model": "perfect", "n": 3}]
    assert wh.query("select count(*) n from judgements").loc[0, "n"] == 0  # an empty table still has its view
    assert sorted(p["model"] for p in wh.partitions("rollouts")) == ["parrot", "perfect"]
    back = wh.read("rollouts", {"benchmark_split": "smoke/test", "model": "perfect"})
    assert list(back["sample_id"]) == ["s0", "s1", "s2"] and back["latency_s"].tolist() == [0.5] * 3
    # callers that check `wh.partition_file(...).exists()` (the dataset sensor, tool_calls, sharding) see objects
    assert wh.partition_file("rollouts", {"benchmark_split": "smoke/test", "model": "perfect"}).exists()
    assert not wh.partition_file("rollouts", {"benchmark_split": "smoke/test", "model": "fixed"}).exists()
    assert str(wh.partition_file("rollouts", {"benchmark_split": "smoke/test", "model": "perfect"})) == uri
    with pytest.raises(WarehouseError, match="materialize it first"):
        wh.read("rollouts", {"benchmark_split": "smoke/test", "model": "fixed"})

    # a second process (a fresh Warehouse) sees the objects through its own connection
    other = Warehouse(home / "warehouse.duckdb")
    assert other.query("select count(*) n from rollouts").loc[0, "n"] == 7


def test_credentials_in_storage_options_are_redacted(s3_config):
    from evalpipe.core.redact import redact

    # the secret is masked as a literal wherever it shows up (a log line, an error, a trace field); the access
    # key id is an identifier, not a secret (AWS prints it in error messages), and is kept
    out = redact("upload failed for testing-key-id with testing-secret-value")
    assert "testing-secret-value" not in out and "[REDACTED]" in out


def test_local_disk_stays_the_default(home, write_config, monkeypatch):
    from pathlib import Path

    monkeypatch.delenv("EVALS_WAREHOUSE_URI", raising=False)
    write_config((Path(__file__).parent / "fixtures" / "evals.test.yaml").read_text())
    wh = Warehouse(home / "warehouse.duckdb")
    assert wh.store is None
    path = wh.write("rollouts", pd.DataFrame({"sample_id": ["a"]}), {"benchmark_split": "smoke/test", "model": "m"})
    assert path == home / "warehouse" / "rollouts" / "benchmark_split=smoke%2Ftest" / "model=m" / "part.parquet"


def test_one_partition_end_to_end(s3_endpoint, home, instance, monkeypatch, tmp_path):
    """EVALS_WAREHOUSE_URI with credentials and endpoint from the standard AWS env vars (the test config as is)."""
    from eval_assets.launch import evaluate
    from evalpipe.project import load_config

    prefix = f"s3://{BUCKET}/{tmp_path.name}"
    monkeypatch.setenv("EVALS_WAREHOUSE_URI", prefix)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret-value")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")

    result = evaluate(load_config(), ["smoke/test"], ["perfect"], instance=instance)
    assert result.success, result
    wh = Warehouse(home / "warehouse.duckdb")
    board = wh.query("select model, value, n from leaderboard")
    assert board.to_dict("records") == [{"model": "perfect", "value": 1.0, "n": 8}]
    assert len(wh.query("select * from rollouts where model = 'perfect'")) == 8
    assert any(k.startswith("rollouts/benchmark_split=smoke%2Ftest/model=perfect/")
               for k in _objects(s3_endpoint, prefix))
    assert not (home / "warehouse").exists()


def test_a_damaged_object_is_named(s3_endpoint, s3_config, home):
    import s3fs

    wh = Warehouse(home / "warehouse.duckdb")
    wh.write("rollouts", pd.DataFrame({"sample_id": ["a"]}), {"benchmark_split": "smoke/test", "model": "perfect"})
    bad = wh.store.partition_uri("rollouts", {"benchmark_split": "smoke/test", "model": "fixed"})
    s3fs.S3FileSystem(**_options(s3_endpoint)).pipe(bad[len("s3://"):], b"not parquet at all")
    with pytest.raises(WarehouseError, match=r"damaged rollouts partition object .*model=fixed/part.parquet"):
        wh.query("select count(*) from rollouts")
