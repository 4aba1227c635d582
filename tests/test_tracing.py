"""OpenTelemetry tracing: off by default (runners untouched), and with the JSONL exporter one span per model
call, judge call and tool call, each carrying the Dagster run id."""
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from evalpipe.runners import register_runner
from evalpipe.runners.base import Runner
from evalpipe.core.types import Generation
from tests.helpers.configs import smoke_benchmark

MODELS = """models:
  tooly: {{runner: test-tooly}}
{extra}
"""


@register_runner("test-tooly", replace=True)
class ToolyRunner(Runner):
    """Two tool calls, then the ground truth."""

    name = "test-tooly"

    async def generate(self, request):
        calls = [{"id": "a", "function": {"name": "search"}}, {"id": "b", "function": {"name": "calculator"}}]
        return Generation(text=request.target, input_tokens=7, output_tokens=1,
                          trajectory=[{"type": "tool_calls", "tool_calls": calls}])


def test_off_by_default_leaves_runners_alone(write_config, monkeypatch):
    from evalpipe.pipeline import tracing
    from evalpipe.core.config import ModelConfig
    from evalpipe.runners import build_runner

    monkeypatch.delenv("EVALS_TRACING", raising=False)
    write_config(smoke_benchmark(limit=3) + MODELS.format(extra=""))
    assert tracing.settings() is None
    with tracing.scope("run-1", "rollouts"):
        runner = build_runner(ModelConfig(key="tooly", runner="test-tooly"))
    assert "generate" not in vars(runner)  # the class's own method: no wrapper, no overhead


def test_jsonl_spans_for_model_and_tool_calls_with_the_run_id(home, write_config, instance, tmp_path, monkeypatch):
    from eval_assets.launch import evaluate
    from evalpipe.project import load_config

    monkeypatch.delenv("EVALS_TRACING", raising=False)
    write_config(smoke_benchmark(limit=3) + MODELS.format(extra="tracing: {exporter: jsonl, path: traces/spans.jsonl}"))
    result = evaluate(load_config(), ["smoke/extra"], ["tooly"], instance=instance)
    assert result.success
    run_id = result.partitions[0].run_id
    spans = [json.loads(line) for line in (tmp_path / "traces" / "spans.jsonl").read_text().splitlines()]
    by_name: dict[str, list] = {}
    for s in spans:
        by_name.setdefault(s["name"], []).append(s)
    assert len(by_name["model_call"]) == 3 and len(by_name["tool_call"]) == 6
    assert {s["attributes"]["evals.tool"] for s in by_name["tool_call"]} == {"search", "calculator"}
    assert {s["attributes"]["evals.sample_id"] for s in by_name["model_call"]} == {"s1", "s2", "s3"}
    assert by_name["model_call"][0]["attributes"]["gen_ai.usage.input_tokens"] == 7
    assert {s["attributes"]["dagster.run_id"] for s in spans} == {run_id}  # every span, including the step spans
    assert {s["attributes"]["evals.model"] for s in spans} == {"tooly"}
    # the tree: step span -> model_call -> tool_call
    ids = {s["span_id"]: s for s in spans}
    tool = by_name["tool_call"][0]
    assert ids[tool["parent_span_id"]]["name"] == "model_call"
    assert ids[ids[tool["parent_span_id"]]["parent_span_id"]]["name"] == "rollouts"
    assert len(by_name["judgements"]) == 1


def test_judge_calls_are_spans_of_the_judgements_step(home, write_config, instance, tmp_path, monkeypatch):
    """A model-graded metric's judge requests go through a runner too: traced as judge_call."""
    from evalpipe.pipeline import tracing
    from evalpipe.core.config import ModelConfig
    from evalpipe.runners import build_runner
    from evalpipe.core.types import RolloutRequest

    monkeypatch.setenv("EVALS_TRACING", f"jsonl:{tmp_path / 'j.jsonl'}")
    write_config(smoke_benchmark(limit=3) + MODELS.format(extra=""))

    async def ask(runner):
        return await runner.generate(RolloutRequest(sample_id="judge:abc", messages=[], fingerprint="f", target="yes"))

    import asyncio

    with tracing.scope("run-j", "judgements", benchmark_split="smoke/extra", model="tooly"):
        runner = build_runner(ModelConfig(key="judge-model", runner="test-tooly"))
        asyncio.run(ask(runner))
    spans = [json.loads(line) for line in (tmp_path / "j.jsonl").read_text().splitlines()]
    judge = [s for s in spans if s["name"] == "judge_call"]
    assert len(judge) == 1 and judge[0]["attributes"]["dagster.run_id"] == "run-j"
    assert judge[0]["attributes"]["evals.model_key"] == "judge-model"


def test_bad_tracing_settings_are_config_errors(write_config, monkeypatch):
    from evalpipe.pipeline import tracing
    from evalpipe.core.errors import ConfigError

    monkeypatch.setenv("EVALS_TRACING", "zipkin:http://x")
    with pytest.raises(ConfigError, match="unknown trace exporter 'zipkin'"):
        tracing.settings()
    monkeypatch.setenv("EVALS_TRACING", "jsonl")
    with pytest.raises(ConfigError, match="needs a file path"):
        tracing.settings()


def test_otlp_exporter_posts_to_the_endpoint(monkeypatch, write_config):
    """The OTLP/HTTP exporter really sends spans to a collector (here a loopback server)."""
    from evalpipe.pipeline import tracing

    got: list[tuple[str, int]] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.path, len(body)))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    server = HTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        write_config(smoke_benchmark(limit=3) + MODELS.format(extra=""))
        monkeypatch.setenv("EVALS_TRACING", f"otlp:http://127.0.0.1:{server.server_port}/v1/traces")
        with tracing.scope("run-otlp", "rollouts"):
            pass
        assert got and got[0][0] == "/v1/traces" and got[0][1] > 0
    finally:
        server.shutdown()


def test_traced_runner_factories_keep_their_declarations(write_config, monkeypatch):
    """Tracing wraps every runner factory; the wrapper must still show what the runner declares, or its options
    would pass unchecked (and an unknown one be silently ignored) whenever tracing is on."""
    from evalpipe.pipeline import tracing
    from evalpipe.project.schema import check_run_options
    from evalpipe.project import load_config
    from evalpipe.core.errors import ConfigError
    from evalpipe.runners import get_runner
    from evalpipe.runners.echo import EchoRunner

    write_config(smoke_benchmark(limit=3) + MODELS.format(extra="  parrot: {runner: echo, reply: target}"))
    tracing.instrument_runners()
    echo = get_runner("echo")
    assert getattr(echo, "_evals_traced", False) and echo.option_schema is EchoRunner.option_schema
    with pytest.raises(ConfigError, match="unknown option 'replly' for runner 'echo'"):
        check_run_options(load_config(), ["smoke/extra"], ["parrot"], {}, {"replly": "target"})


def _ingestion_server():
    """A loopback stand-in for Azure Monitor's ingestion endpoint: records each POSTed envelope batch."""
    import gzip

    got: list[tuple[str, list]] = []

    class Ingestion(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "gzip" or body[:2] == b"\x1f\x8b":
                body = gzip.decompress(body)
            got.append((self.path, json.loads(body)))
            n = len(got[-1][1])
            reply = json.dumps({"itemsReceived": n, "itemsAccepted": n, "errors": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *a):
            pass

    server = HTTPServer(("127.0.0.1", 0), Ingestion)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, got


def test_azure_monitor_exporter_sends_the_run_spans_and_keeps_the_connection_string_secret(
        home, write_config, instance, tmp_path, monkeypatch):
    """`tracing: {exporter: azure_monitor}`: a real run's spans reach Azure Monitor's exporter, which POSTs them to
    the ingestion endpoint named in the connection string (a loopback server); the connection string, read from the
    env var the config names, is in no file the run writes."""
    from eval_assets.launch import evaluate
    from evalpipe.project import load_config
    from evalpipe.project.redaction import install_redaction
    from tests.helpers.secrets import all_text, found

    server, got = _ingestion_server()
    ikey = "4f1c2a7e-0b9d-4c55-9e0a-5d3b1f2e8c77"
    conn = f"InstrumentationKey={ikey};IngestionEndpoint=http://127.0.0.1:{server.server_port}/"
    monkeypatch.delenv("EVALS_TRACING", raising=False)
    monkeypatch.setenv("APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL", "true")  # no calls home to Microsoft
    monkeypatch.setenv("APPLICATIONINSIGHTS_SDKSTATS_DISABLED", "true")  # nor usage metrics to the endpoint
    monkeypatch.setenv("AI_CONN", conn)
    try:
        write_config(smoke_benchmark(limit=3) + MODELS.format(
            extra="tracing: {exporter: azure_monitor, connection_string_env: AI_CONN}"))
        install_redaction()
        result = evaluate(load_config(), ["smoke/extra"], ["tooly"], instance=instance)
        assert result.success
    finally:
        from evalpipe.pipeline import tracing

        p = tracing._providers.pop(("azure_monitor", "AI_CONN"), None)
        if p is not None:  # flushed and closed while the endpoint still listens
            p.shutdown()
        server.shutdown()
    assert got and {path for path, _ in got} == {"/v2.1/track"}
    envelopes = [e for _, batch in got for e in batch]
    assert {e["iKey"] for e in envelopes} == {ikey}
    names = [e["data"]["baseData"].get("name") for e in envelopes if e["data"]["baseType"] in ("RemoteDependencyData", "RequestData")]
    assert names.count("model_call") == 3 and names.count("tool_call") == 6
    props = [e["data"]["baseData"].get("properties", {}) for e in envelopes]
    assert {p.get("dagster.run_id") for p in props if "dagster.run_id" in p} == {result.partitions[0].run_id}
    leaks = found(all_text(tmp_path), tmp_path, {"connection string": conn, "instrumentation key": ikey})
    assert leaks == []
    from evalpipe.core.redact import get_redactor

    # its variable's name looks like no secret; the config naming it makes its value one (masked on every write path)
    assert ikey not in get_redactor().redact(f"connecting with {conn}")


def test_azure_monitor_without_its_connection_string_is_a_one_line_config_error(monkeypatch):
    from evalpipe.pipeline import tracing
    from evalpipe.core.errors import ConfigError

    monkeypatch.delenv("APPLICATIONINSIGHTS_CONNECTION_STRING", raising=False)
    monkeypatch.setenv("EVALS_TRACING", "azure_monitor")
    with pytest.raises(ConfigError, match=r"\$APPLICATIONINSIGHTS_CONNECTION_STRING, which is not set"):
        tracing.settings()
    monkeypatch.setenv("MY_AI", "InstrumentationKey=00000000-0000-0000-0000-000000000000")
    monkeypatch.setenv("EVALS_TRACING", "azure_monitor:MY_AI")
    assert tracing.settings() == ("azure_monitor", "MY_AI")  # the variable's name: the secret stays in the env
