"""`ToolEnv`: the tool layer of one benchmark split, built from its `tools:` config (docs/tools.md).

    tools:
      fixtures: data/tooluse/fixtures     # folder of JSONL fixtures (replayed tools)
      allowlist: data/tooluse/allowlist.txt
      schemas: data/tooluse/tools.json    # OpenAI function-tool schemas offered to every sample (file or list)
      live: [mypkg.tools:lookup]          # live Python tools: module:function, or {function, name, description, parameters}
      python: true                        # a stateful python tool in the sandbox (one session per sample)
      bash: false                         # a bash tool in the same sandbox (off unless enabled)
      mode: replay                        # replay (fixtures answer) | live (live tools run)
    options: {max_turns: 8, max_tool_calls: 32, tool_timeout_s: 30, tool_output_cap: 16384}

One `ToolEnv` serves a whole partition; each sample gets its own `ToolSession` (execute.py).
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from evalpipe.core.errors import ConfigError
from evalpipe.core.file_caps import DEFAULT_CAP, FileCap, read_text, split_cap
from evalpipe.tools.base import Tool
from evalpipe.tools.execute import DEFAULT_OUTPUT_CAP, ToolSession
from evalpipe.tools.replay import ToolBroker
from evalpipe.tools.schema import as_function_tool, schema_name

TOOL_KEYS = ("fixtures", "allowlist", "schemas", "live", "python", "bash", "mode")
MODES = ("replay", "live")
DEFAULT_MAX_TURNS = 8
DEFAULT_MAX_TOOL_CALLS = 32
DEFAULT_TOOL_TIMEOUT_S = 30.0


def read_schemas(spec: Any, resolve: Callable[[str], Path], cap: FileCap = DEFAULT_CAP) -> list[dict[str, Any]]:
    """`schemas:` as a list of schemas, a file (JSON list, JSONL, YAML; read under `cap`), or a list mixing both."""
    items = spec if isinstance(spec, list) else [spec]
    out: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, dict):
            out.append(as_function_tool(item))
            continue
        path = resolve(str(item))
        if not path.is_file():
            raise ConfigError(f"tools schemas file {path} not found")
        text = read_text(path, cap)
        if path.suffix == ".jsonl":
            loaded = [json.loads(ln) for ln in text.splitlines() if ln.strip()]
        else:
            import yaml

            loaded = yaml.safe_load(text) or []
        if isinstance(loaded, dict):
            loaded = loaded.get("tools", [loaded])
        if not isinstance(loaded, list):
            raise ConfigError(f"tools schemas file {path} must hold a list of function-tool schemas")
        out += [as_function_tool(s) for s in loaded]
    return out


class ToolEnv:
    def __init__(self, config: dict[str, Any] | None, options: dict[str, Any] | None = None,
                 resolve: Callable[[str], Path] = Path, mode: str | None = None, where: str = "tools",
                 configured_sandbox: str | None = None):
        # configured_sandbox: the project's `sandbox:` (the split's `sandbox` option and $EVALS_SANDBOX win)
        cfg = dict(config or {})
        options = dict(options or {})
        unknown = set(cfg) - set(TOOL_KEYS)
        if unknown:
            raise ConfigError(f"{where}: unknown keys {sorted(unknown)} under 'tools'; allowed: {', '.join(TOOL_KEYS)}")
        self.mode = str(mode or cfg.get("mode") or "replay")
        if self.mode not in MODES:
            raise ConfigError(f"{where}: tools mode {self.mode!r} must be one of {', '.join(MODES)}")
        self.fixtures_dir = resolve(str(cfg["fixtures"])) if cfg.get("fixtures") else None
        self.allowlist_file = resolve(str(cfg["allowlist"])) if cfg.get("allowlist") else None
        cap = split_cap(where, options)  # the split's `max_file_mb` caps its tool files too
        self.broker = ToolBroker.from_paths(self.fixtures_dir, self.allowlist_file, cap)
        self.max_turns = int(options.get("max_turns", DEFAULT_MAX_TURNS))
        self.max_tool_calls = int(options.get("max_tool_calls", DEFAULT_MAX_TOOL_CALLS))
        self.tool_timeout_s = float(options.get("tool_timeout_s", DEFAULT_TOOL_TIMEOUT_S))
        self.output_cap = int(options.get("tool_output_cap", DEFAULT_OUTPUT_CAP))
        self.sandbox_backend = options.get("sandbox")
        self.configured_sandbox = configured_sandbox
        self.options = options
        if self.max_turns < 1 or self.max_tool_calls < 0:
            raise ConfigError(f"{where}: max_turns must be >= 1 and max_tool_calls >= 0")
        self.config_schemas = read_schemas(cfg["schemas"], resolve, cap) if cfg.get("schemas") else []
        from evalpipe.tools.live import build_live_tools, builtin_tool

        self.live_specs = list(cfg.get("live") or [])
        self.live_tools: dict[str, Tool] = {t.name: t for t in build_live_tools(self.live_specs, where)}
        self.always_live: set[str] = set()  # the sandbox tools have no fixtures: they run in both modes
        for flag in ("python", "bash"):
            if cfg.get(flag):
                tool = builtin_tool(flag, options)
                self.live_tools[tool.name] = tool
                self.always_live.add(tool.name)
        self.python, self.bash = bool(cfg.get("python")), bool(cfg.get("bash"))
        self.counts: Counter[str] = Counter()

    @classmethod
    def for_split(cls, split: Any, mode: str | None = None, configured_sandbox: str | None = None) -> "ToolEnv | None":
        """The split's tool layer, or None when it configures no tools."""
        cfg = split.options.get("tools")
        if not cfg:
            return None
        if not isinstance(cfg, dict):
            raise ConfigError(f"{split.key}: 'tools' must be a mapping ({', '.join(TOOL_KEYS)}); see docs/tools.md")
        return cls(cfg, split.options, resolve=split.resolve, mode=mode, where=split.key,
                   configured_sandbox=configured_sandbox)

    def schemas(self) -> list[dict[str, Any]]:
        """Schemas the config offers every sample: `schemas:` plus the live and sandbox tools."""
        out = {schema_name(s): s for s in self.config_schemas}
        for t in self.live_tools.values():
            out.setdefault(t.name, t.schema())
        return list(out.values())

    def allowed(self, name: str, offered: list[str]) -> bool:
        """Tools configured here (live, python, bash) always; replayed tools by the allowlist (without one: the
        tools the sample offers and those with fixtures)."""
        return name in self.live_tools or self.broker.allowed(name, offered)

    def tool_registry_sha256(self) -> str:
        return self.broker.sha256()

    def identity(self) -> dict[str, Any]:
        """What changes tool answers or loop behaviour: hashed into each tool-using sample's fingerprint."""
        return {"tool_registry_sha256": self.broker.sha256(), "mode": self.mode,
                "live": [t.schema() for t in sorted(self.live_tools.values(), key=lambda t: t.name)],
                "live_specs": [s if isinstance(s, str) else json.dumps(s, sort_keys=True) for s in self.live_specs],
                "max_turns": self.max_turns, "max_tool_calls": self.max_tool_calls, "output_cap": self.output_cap}

    def sandbox_factory(self, files: list[str]) -> Callable[[], Any] | None:
        if not self.always_live:
            return None
        backend, timeout, configured = self.sandbox_backend, self.tool_timeout_s, self.configured_sandbox

        def open_session() -> Any:
            from evalpipe import sandbox

            if not hasattr(sandbox, "open_session"):
                from evalpipe.tools.base import ToolError

                raise ToolError("this evalpipe's sandbox has no open_session(); update evalpipe.sandbox")
            kwargs: dict[str, Any] = {"files": list(files), "timeout_s": timeout}
            if backend:
                kwargs["backend"] = backend
            if configured:
                kwargs["configured_backend"] = configured
            return sandbox.open_session(**kwargs)

        return open_session

    def session(self, sample_id: str, offered: list[str], files: list[str] | None = None) -> ToolSession:
        return ToolSession(self, sample_id, offered, files)
