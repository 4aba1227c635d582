"""Optional OpenTelemetry tracing of each sample: model calls, judge calls, tool calls. Off by default.

Turn it on with the config (`tracing: {exporter: jsonl, path: traces.jsonl}`, `{exporter: otlp, endpoint:
http://host:4318/v1/traces}` or `{exporter: azure_monitor, connection_string_env: APPLICATIONINSIGHTS_CONNECTION_STRING}`
) or the env var `EVALS_TRACING` (`off`, `jsonl:<path>`, `otlp`, `otlp:<endpoint>`, `azure_monitor`,
`azure_monitor:<ENV_VAR>`), which wins over the config. Azure Monitor's connection string is a secret: only the name
of the variable holding it is configured, and the value is read when the exporter is built, never stored.

How spans are made: while tracing is on, every registered runner factory is wrapped, so each runner built in
this process (the evaluated model's, and the judges' built by model-graded metrics) gets a traced `generate`:
one `model_call` span per sample in the `rollouts` step, one `judge_call` span per judge request in the
`judgements` step, and a `tool_call` child span per tool call found in the generation's trajectory. Each asset
step opens a `scope` carrying the Dagster run id, step, benchmark split and model, and a span processor
stamps them on every span. When tracing is off nothing is wrapped and `scope` returns at once: zero overhead.
"""
from __future__ import annotations

import contextlib
import contextvars
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from evalpipe.core.errors import ConfigError

TRACING_ENV = "EVALS_TRACING"
AZURE_CONNECTION_ENV = "APPLICATIONINSIGHTS_CONNECTION_STRING"  # Azure's own default name for it
_scope_attrs: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("evals_trace_scope", default=None)
# the (exporter, target) of the innermost scope: runners built inside it trace there (the scope was handed the config)
_scope_conf: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("evals_trace_conf", default=None)
_lock = threading.Lock()
_providers: dict[tuple[str, str], Any] = {}


def settings(cfg: Any = None) -> tuple[str, str] | None:
    """(exporter, target) or None when off. `EVALS_TRACING` wins over `tracing:` of `cfg` (the project's
    EvalConfig, handed in by the caller; None: the env var only)."""
    env = os.environ.get(TRACING_ENV, "").strip()
    if env:
        if env.lower() in ("off", "none", "0", "false"):
            return None
        kind, _, target = env.partition(":")
        return _check(kind.lower(), target, f"{TRACING_ENV}={env}")
    if cfg is None:
        return None
    t = cfg.tracing
    kind = str(t.get("exporter") or "none").lower()
    if kind in ("none", "off"):
        return None
    if kind == "azure_monitor":
        target = t.get("connection_string_env")
    else:
        target = t.get("path") if kind == "jsonl" else t.get("endpoint")
    if kind == "jsonl" and target and not os.path.isabs(str(target)):
        target = str((cfg.path.parent / str(target)).resolve())
    return _check(kind, str(target or ""), "tracing: in the config")


def _check(kind: str, target: str, where: str) -> tuple[str, str]:
    if kind == "jsonl":
        if not target:
            raise ConfigError(f"{where}: the jsonl exporter needs a file path (jsonl:/path/traces.jsonl)")
        return kind, str(Path(target).expanduser().resolve())
    if kind == "otlp":  # empty target: the OTLP exporter's own default / OTEL_EXPORTER_OTLP_* env vars
        return kind, target
    if kind == "azure_monitor":  # the target is the NAME of the env var holding the connection string
        name = target or AZURE_CONNECTION_ENV
        if not os.environ.get(name):
            raise ConfigError(f"{where}: the azure_monitor exporter reads its connection string from ${name}, which "
                              f"is not set; export it (or name another variable with connection_string_env)")
        return kind, name
    raise ConfigError(f"{where}: unknown trace exporter {kind!r}; use jsonl, otlp, azure_monitor or off")


def azure_monitor_exporter(env_name: str):
    """Azure Monitor's span exporter, given the connection string from `$env_name` (read here, held only by the
    exporter). Offline retry storage is off: it would keep spans on disk in a folder named after the instrumentation
    key (part of the secret); a failed batch is dropped, as with OTLP."""
    try:
        from azure.monitor.opentelemetry.exporter import AzureMonitorTraceExporter
    except ImportError as e:
        raise ConfigError("tracing: the azure_monitor exporter needs azure-monitor-opentelemetry-exporter; "
                          "pip install 'evalpipe[azure]'") from e
    conn = os.environ.get(env_name)
    if not conn:
        raise ConfigError(f"tracing: ${env_name} (the Azure Monitor connection string) is not set")
    return AzureMonitorTraceExporter(connection_string=conn, disable_offline_storage=True)


class JsonlSpanExporter:
    """Appends each finished span as one JSON line (no collector needed). Safe across processes: each batch is
    one `write` on a file opened in append mode."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def export(self, spans) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        from evalpipe.core.redact import redact_obj

        lines = []
        for s in spans:
            ctx = s.get_span_context()
            rec = {
                "name": s.name, "trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x"),
                "parent_span_id": format(s.parent.span_id, "016x") if s.parent is not None else None,
                "start_time_unix_nano": s.start_time, "end_time_unix_nano": s.end_time,
                "status": s.status.status_code.name, "attributes": dict(s.attributes or {}),
                "resource": dict(s.resource.attributes or {}),
            }
            lines.append(json.dumps(redact_obj(rec), default=str))
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _scope_stamper():
    """A span processor that copies the current scope (run id, step, partition) onto every span.
    (Built on first use: OpenTelemetry is imported only when tracing is on.)"""
    from opentelemetry.sdk.trace import SpanProcessor

    class ScopeStamper(SpanProcessor):
        def on_start(self, span, parent_context=None) -> None:
            attrs = _scope_attrs.get()
            if attrs:
                span.set_attributes(attrs)

    return ScopeStamper()


def provider(conf: tuple[str, str]):
    """One TracerProvider per (exporter, target) in this process (not the global one: we don't hijack an
    application's own OpenTelemetry setup)."""
    with _lock:
        p = _providers.get(conf)
        if p is not None:
            return p
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        kind, target = conf
        if kind == "jsonl":
            exporter = JsonlSpanExporter(target)
        elif kind == "azure_monitor":
            exporter = azure_monitor_exporter(target)
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(endpoint=target) if target else OTLPSpanExporter()
        p = TracerProvider(resource=Resource.create({"service.name": "evalpipe"}))
        p.add_span_processor(_scope_stamper())
        p.add_span_processor(BatchSpanProcessor(exporter))
        _providers[conf] = p
        return p


def _tracer():
    conf = _scope_conf.get() or settings()
    return provider(conf).get_tracer("evalpipe") if conf else None


# ---- runner instrumentation ---------------------------------------------------------------------------------------
def _tool_calls(trajectory: list[Any]) -> list[dict[str, Any]]:
    calls = []
    for ev in trajectory or []:
        if not isinstance(ev, dict):
            continue
        if isinstance(ev.get("tool_calls"), list):
            calls += [c for c in ev["tool_calls"] if isinstance(c, dict)]
        elif ev.get("type") in ("tool_call", "tool") or ev.get("role") == "tool":
            calls.append(ev)
    return calls


def _tool_name(call: dict[str, Any]) -> str:
    fn = call.get("function")
    if isinstance(fn, dict) and fn.get("name"):
        return str(fn["name"])
    return str(call.get("name") or call.get("tool") or "tool")


def _traced_generate(runner: Any, generate: Any, tracer: Any):
    async def generate_traced(request):
        scope = _scope_attrs.get() or {}
        kind = "judge_call" if scope.get("evals.step") == "judgements" else "model_call"
        attrs = {"evals.sample_id": request.sample_id, "evals.runner": getattr(runner, "name", "?"),
                 "evals.model_key": getattr(getattr(runner, "model", None), "key", "") or "",
                 "evals.fingerprint": request.fingerprint}
        with tracer.start_as_current_span(kind, attributes=attrs) as span:
            start = time.time_ns()
            gen = await generate(request)
            end = time.time_ns()
            for k, v in (("gen_ai.usage.input_tokens", gen.input_tokens), ("gen_ai.usage.output_tokens", gen.output_tokens),
                         ("evals.cost_usd", gen.cost), ("evals.finish_reason", gen.finish_reason)):
                if v is not None:
                    span.set_attribute(k, v)
            for i, call in enumerate(_tool_calls(gen.trajectory)):
                # The runner reports tool calls after the fact: child spans inside the call's time range.
                child = tracer.start_span("tool_call", start_time=start, attributes={
                    "evals.sample_id": request.sample_id, "evals.tool": _tool_name(call), "evals.tool_index": i})
                child.end(end_time=end)
            return gen

    return generate_traced


class _TracedFactory:
    """A runner factory whose runners are traced. Everything else reads through to the factory it wraps: its
    declarations (`option_schema`, `config_problems`, ...) must still be seen, or the runner's options would pass
    unchecked whenever tracing is on."""

    _evals_traced = True

    def __init__(self, factory: Any):
        self._evals_inner = factory
        self.__doc__ = factory.__doc__  # `evalpipe runners` still describes the runner

    def __call__(self, model):
        runner = self._evals_inner(model)
        tracer = _tracer()
        if tracer is not None:  # tracing turned off since: leave the runner as it is
            runner.generate = _traced_generate(runner, runner.generate, tracer)  # shadows the class's method
        return runner

    def __getattr__(self, name: str) -> Any:  # only for what the wrapper itself lacks
        return getattr(self._evals_inner, name)


def _wrap_factory(factory: Any):
    return factory if getattr(factory, "_evals_traced", False) else _TracedFactory(factory)


def instrument_runners() -> None:
    """Wrap every registered runner factory (idempotent; runners registered later are wrapped next time)."""
    from evalpipe.runners import base

    registry = base._RUNNERS
    for name in registry.names():
        f = registry.get(name)
        if not getattr(f, "_evals_traced", False):
            registry.register(name, _wrap_factory(f), replace=True)


# ---- scopes -------------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def scope(run_id: str | None, step: str, config: Any = None, **attrs: Any) -> Iterator[None]:
    """Everything traced inside carries the Dagster run id and this step's partition. A no-op when off.
    `config`: the project's EvalConfig (its `tracing:`; see `settings`)."""
    conf = settings(config)
    if conf is None:
        yield
        return
    instrument_runners()
    values = {"dagster.run_id": run_id or "", "evals.step": step,
              **{f"evals.{k}": str(v) for k, v in attrs.items() if v is not None}}
    token, conf_token = _scope_attrs.set(values), _scope_conf.set(conf)
    tracer = provider(conf).get_tracer("evalpipe")
    try:
        with tracer.start_as_current_span(step):
            yield
    finally:
        _scope_attrs.reset(token)
        _scope_conf.reset(conf_token)
        provider(conf).force_flush()
