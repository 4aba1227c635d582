"""Secrets written in the config (api_base query and userinfo, header values, secret-named keys) and a provider's
error body that echoes them back are found nowhere: not under DAGSTER_HOME (raw bytes, Parquet read back, SQLite
blobs inflated: Dagster's event log and run storage), not in the artifacts, not in the CLI output. The runs go
through the real CLI, the real instance, litellm's OpenAI-compatible fast path and `litellm.acompletion`, against
a loopback server (benchmarks/mock_server.py)."""
import json

import pytest
from click.testing import CliRunner

import eval_assets.definitions  # noqa: F401  (partitions come from the test config at first import, not from ours)

from benchmarks.mock_server import MockLLM, serve_in_thread
from evalpipe.metrics import register_metric
from evalpipe.metrics.base import Metric
from evalpipe.core.redact import MASK, Redactor, secrets_in_config
from tests.helpers.cli import restore_cli_env
from tests.helpers.secrets import all_text, found

S = {
    "env_key": "trust-env-key-PLANTED-0001",        # only known as the model's api_key_env value
    "query_key": "PLANTEDquerykey0002abc",          # api_base: ...?key=<this>
    "custom_auth": "PLANTEDcustomauth0003",         # extra_headers: X-Custom-Auth
    "ocp": "PLANTEDocpapim0004subscription",        # extra_headers: Ocp-Apim-Subscription-Key
    "userinfo": "PLANTEDuserinfo0005pw",            # settings: {results_db: postgres://u:<this>@db/x}
    "nested": "PLANTEDnestedpassword0006",          # settings: {service: {password: <this>}}
}
ECHO = "echo the headers back"
CRASH = "crash the judge"


class EchoingMock(MockLLM):
    """Answers normally, except: ECHO gets a 401 whose body repeats the request's headers and path (as badly
    behaved gateways do). Paths are recorded with their query string."""

    def __init__(self):
        super().__init__(latency=0)
        self.paths: list[str] = []

    def handle(self, method, path, body):
        self.paths.append(path)
        if method == "POST" and ECHO in body.decode("utf-8", "replace"):
            return 401, {"Content-Type": "application/json"}, json.dumps(
                {"error": {"message": f"denied for headers {json.dumps(self.last_headers)} at {path}"}})
        return super().handle(method, path.split("?", 1)[0], body)


@register_metric("test-trust-crashing", replace=True)
class CrashingMetric(Metric):
    """Fails the judgements step with a header value in the exception (a careless plugin): a step failure, which
    Dagster stores in its event log."""

    name = "test-trust-crashing"

    def score(self, item):
        if CRASH in (item.input or ""):
            raise RuntimeError(f"cannot judge: upstream said X-Custom-Auth={S['custom_auth']} key={S['query_key']}")
        from evalpipe.core.types import Score

        return Score(value=1.0, correct=True)


def test_config_secrets_are_collected():
    cfg = {"models": {"m": {"api_base": "https://h/v1?api-version=2024-02-01&key=abcdef123456&x=short",
                            "params": {"extra_headers": {"X-Custom-Auth": "Basic dXNlcjpwYXNz", "Content-Type": "application/json"}},
                            "api_key": "plainvalue99"}},
           "warehouse": {"uri": "postgresql://bob:hunter2pw@db:5432/x"}, "other": {"max_tokens": 123456},
           "checkpoints": {"key_prefix": "ckpt-run-", "dir": "/data/ckpts"}}
    found = secrets_in_config(cfg)
    assert {"abcdef123456", "Basic dXNlcjpwYXNz", "dXNlcjpwYXNz", "plainvalue99", "hunter2pw"} <= found
    assert not found & {"2024-02-01", "application/json", "123456", "short", "ckpt-run-", "/data/ckpts"}
    r = Redactor()
    assert r.redact("GET https://h/v1/chat/completions?api-version=1&subscription-key=zzzzzz&sig=abc") == \
        f"GET https://h/v1/chat/completions?api-version=1&subscription-key={MASK}&sig={MASK}"
    assert r.redact("postgresql://bob:s3cr3t@db/x") == f"postgresql://bob:{MASK}@db/x"


def test_query_string_goes_after_the_path():
    from evalpipe.runners.openai_compat import chat_completions_url

    assert chat_completions_url("https://h/v1?api-version=X") == "https://h/v1/chat/completions?api-version=X"
    assert chat_completions_url("https://h/v1/") == "https://h/v1/chat/completions"
    assert chat_completions_url("https://h/v1/chat/completions?k=1") == "https://h/v1/chat/completions?k=1"


@pytest.mark.slow
def test_config_secrets_are_nowhere(home, write_config, tmp_path, monkeypatch):
    monkeypatch.setenv("TRUST_PROVIDER_CREDS", S["env_key"])
    restore_cli_env(monkeypatch)
    data = tmp_path / "q.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "q": "What is 2+2?", "a": "answer: What is 2+2?"},
        {"id": "b", "q": ECHO, "a": "x"},
    ]) + "\n")
    crash = tmp_path / "crash.jsonl"
    crash.write_text(json.dumps({"id": "c", "q": CRASH, "a": "y"}) + "\n")
    mock = EchoingMock()
    with serve_in_thread(mock) as (_, base):
        write_config(f"""
benchmarks:
  smoke:
    adapter: file
    splits:
      extra: {{path: {data}}}
      test: {{path: {crash}, metrics: [test-trust-crashing]}}
    options: {{columns: {{prompt: q, target: a, id: id}}}}
    metrics: [exact_match]
models:
  fast:
    runner: litellm
    model: openai/mock
    api_base: "{base}?api-version=2024-02-01&key={S['query_key']}"
    api_key_env: TRUST_PROVIDER_CREDS
    params:
      extra_headers: {{X-Custom-Auth: {S['custom_auth']}, Ocp-Apim-Subscription-Key: {S['ocp']}}}
    max_retries: 0
  slow:
    runner: litellm
    model: openai/mock
    fast_path: false
    api_base: "{base}?api-version=2024-02-01&key={S['query_key']}"
    api_key_env: TRUST_PROVIDER_CREDS
    params:
      extra_headers: {{X-Custom-Auth: {S['custom_auth']}, Ocp-Apim-Subscription-Key: {S['ocp']}}}
    max_retries: 0
settings: {{service: {{password: {S['nested']}}}, results_db: "postgresql://bob:{S['userinfo']}@db:5432/evals"}}
checks: {{max_error_rate: 1.0}}
""")
        from evalpipe.cli.main import main

        run = CliRunner().invoke(main, ["run", "--benchmark", "smoke", "--model", "fast", "--model", "slow",
                                        "--no-progress"], catch_exceptions=False)
    out = run.output
    # smoke/test fails in its judgements step (the crashing metric): exit 1, with the masked cause on one line
    assert run.exit_code == 1, out
    assert "cannot judge: upstream said X-Custom-Auth=" in out and MASK in out

    # the provider really got the credentials, and the query string after the path, on both paths
    echoed = [p for p in mock.paths if "/chat/completions" in p]
    assert echoed and all(p.startswith("/v1/chat/completions?") and f"key={S['query_key']}" in p for p in echoed), echoed

    from evalpipe.core.config import warehouse_path
    from evalpipe.store.warehouse import Warehouse

    rows = Warehouse(warehouse_path()).query(
        "select model, sample_id, status, error, raw_output from rollouts where benchmark_split = 'smoke/extra' "
        "order by model, sample_id")
    assert rows["status"].tolist() == ["ok", "error", "ok", "error"], rows
    for err in rows["error"].dropna():
        assert err.startswith("HTTP 401") and MASK in err  # the echoed body, masked

    manifest = json.loads((home / "artifacts" / "smoke" / "extra" / "fast" / "latest" / "manifest.json").read_text())
    text = json.dumps(manifest)
    assert f'"X-Custom-Auth": "{MASK}"' in text and f'"Ocp-Apim-Subscription-Key": "{MASK}"' in text
    assert f"key={MASK}" in text and "api-version=2024-02-01" in text

    files = all_text(home)
    tops = {str(p.relative_to(home)).split("/")[0] for p in files}
    # in-process runs capture no compute logs, so Dagster's `storage` folder is not written; history is its run store
    assert {"warehouse", "journal", "artifacts", "history", "logs"} <= tops, tops
    assert found(files, home, S) == []
    assert [name for name, v in S.items() if v in out] == []
    # the step failure really reached Dagster's storage, masked
    assert any("cannot judge: upstream said" in t for t in files.values())
