"""`adapter: tool_integration`: the tool-integration harness's datasets (docs/benchmarks.md, Tool integration).

    tool_integration:
      adapter: tool_integration
      splits:
        shipped: {path: data/tool_integration/items.jsonl}
      options:
        tools: {fixtures: data/tool_integration/fixtures, allowlist: data/tool_integration/allowlist.txt}
      metrics: [tool_integration]

The file: an optional `{"__header__": {...}}` first line, then one item per line, each validated against
`evalpipe/schemas/eval_prompt.schema.json` (a bad item names its line and field). Items name their tools; the
schemas come from `tool_schemas` (option, else the header's `tool_schemas`, else `tools.json` beside the file).
An item without `evidence` gets the leaf values of its expected calls' fixture results (the split's
`tools.fixtures`, looked up with the broker's own normalization). Slices: `kind`, and `locale` where set.

`min_eligible_for_gates` (an option of the split, or `--benchmark-option min_eligible_for_gates=N`): below that many
eligible items a gate is "insufficient", never a pass. Precedence: the option, else the file header's, else the
default (10). The option is a setting of the `tool_integration` metric (so it is in the judge fingerprint), not
of the samples: the dataset fingerprint stays the file's.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Optional

from pydantic import BaseModel, Field

from evalpipe.benchmarks.base import Adapter, register_adapter
from evalpipe.core.errors import ConfigError, DataError
from evalpipe.core.file_caps import FileCap, read_text, split_cap
from evalpipe.tooleval.dataset import read_dataset
from evalpipe.core.types import Sample


def default_evidence(expected_calls: list[dict[str, Any]], fixtures: dict[tuple[str, str], Any],
                     private: set[str], prompt: str = "") -> list[Any]:
    """The leaf values of the expected calls' fixture results, private fields and what the prompt says left out."""
    from evalpipe.tooleval.integration import Answer, facts_of
    from evalpipe.tools.replay import normalized_key

    asked = Answer(prompt)
    out: list[Any] = []
    for c in expected_calls:
        result = fixtures.get((c["name"], normalized_key(c["name"], c.get("arguments") or {})))
        if result is None or (isinstance(result, dict) and result.get("ok") is False):
            continue
        facts, _ = facts_of(result, private)
        for f in facts:
            if asked.strict(f):
                continue
            v = int(f.value) if f.is_number and float(f.value).is_integer() else f.value
            if v not in out:
                out.append(v)
    return out


class ToolIntegrationOptions(BaseModel):
    path: Optional[str] = None
    tool_schemas: Optional[str] = None
    max_file_mb: Optional[float] = None  # the size cap on the dataset, schema and fixture files (core/file_caps.py)
    min_eligible_for_gates: Optional[int] = Field(default=None, ge=1)


@register_adapter("tool_integration")
class ToolIntegrationAdapter(Adapter):
    name = "tool_integration"
    default_metrics = ["tool_integration"]
    option_schema = ToolIntegrationOptions

    def _min_eligible(self) -> int | None:
        v = self.options.get("min_eligible_for_gates")
        if v is None:
            return None
        if type(v) is not int or v < 1:
            raise ConfigError(f"{self.split.key}: min_eligible_for_gates must be an integer >= 1, got {v!r}")
        return v

    def metrics(self) -> list[Any]:
        """The `tool_integration` metric takes `min_eligible_for_gates` from the option when it is set (and the
        metric entry doesn't set it itself)."""
        n = self._min_eligible()
        out = super().metrics()
        if n is None:
            return out
        return [{"name": m, "min_eligible_for_gates": n} if m == "tool_integration" else
                {"min_eligible_for_gates": n, **m} if isinstance(m, dict) and m.get("name") == "tool_integration"
                else m for m in out]

    def _cap(self) -> FileCap:
        return split_cap(self.split.key, self.options)

    def _path(self) -> Path:
        spec = self.options.get("path")
        if not spec:
            raise ConfigError(f"{self.split.key}: adapter tool_integration needs 'path:' (a JSONL dataset file)")
        return self.split.resolve(str(spec))

    def _read(self) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
        if not hasattr(self, "_cache"):
            self._cache = read_dataset(self._path(), cap=self._cap())
        return self._cache

    def header(self) -> dict[str, Any] | None:
        """The file's header as written (for the fingerprint checks), None without one."""
        header, _, _ = self._read()
        return {k: v for k, v in header.items() if k not in ("gates",)} or None

    def header_settings(self) -> dict[str, Any]:
        """The header merged over the defaults, with the split's `min_eligible_for_gates` over both."""
        header, _, sha = self._read()
        n = self._min_eligible()
        return {**header, "file_sha256": sha, **({"min_eligible_for_gates": n} if n is not None else {})}

    def _schemas(self, header: dict[str, Any]) -> dict[str, dict[str, Any]]:
        spec = self.options.get("tool_schemas") or header.get("tool_schemas") or "tools.json"
        p = Path(spec)
        p = p if p.is_absolute() else (self._path().parent / p if not self.options.get("tool_schemas")
                                       else self.split.resolve(str(spec)))
        if not p.is_file():
            raise DataError(f"{self.split.key}: tool schema file {p} not found; set 'tool_schemas:' (a JSON list of "
                            f"OpenAI function-tool schemas)")
        text = read_text(p, self._cap())  # (outside the try: a FileTooLarge is a ValueError too)
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise DataError(f"{p}: not valid JSON ({exc})") from None
        out = {}
        for s in data if isinstance(data, list) else []:
            fn = s.get("function", s) if isinstance(s, dict) else {}
            if isinstance(fn, dict) and fn.get("name"):
                out[fn["name"]] = s if "function" in s else {"type": "function", "function": s}
        if not out:
            raise DataError(f"{p}: expected a JSON list of function-tool schemas")
        return out

    def _fixtures(self) -> dict[tuple[str, str], Any]:
        cfg = self.options.get("tools") or {}
        folder = cfg.get("fixtures") if isinstance(cfg, dict) else None
        if not folder:
            return {}
        from evalpipe.tools.replay import read_fixtures

        return {(f.name, f.key): f.result for f in read_fixtures(self.split.resolve(str(folder)), self._cap())}

    def load(self) -> Iterable[Sample]:
        header, items, _ = self._read()
        schemas = self._schemas(header)
        fixtures = self._fixtures()
        shown = str(self._path())
        samples = []
        for it in items:
            where = f"{shown} line {it['_line']}"
            missing = [t for t in it["tools"] if t not in schemas]
            if missing:
                raise DataError(f"{where}: field 'tools': {missing} not in the tool schema file "
                                f"(known: {', '.join(sorted(schemas))})")
            for c in it.get("expected_calls") or []:
                if c["name"] not in it["tools"]:
                    raise DataError(f"{where}: field 'expected_calls': {c['name']!r} is not among the item's tools")
            prompt = it["prompt"]
            messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
            if it.get("system") and messages[0]["role"] != "system":
                messages.insert(0, {"role": "system", "content": it["system"]})
            user = "\n\n".join(m["content"] for m in messages if m["role"] == "user")
            private = list(it.get("private_fields") or [])
            evidence = it.get("evidence")
            if evidence is None:
                evidence = default_evidence(it.get("expected_calls") or [], fixtures, set(private), user)
            md = {"kind": it["kind"], "expected_calls": it.get("expected_calls") or [], "evidence": evidence,
                  "private_fields": private, "prompt_text": user,
                  "integration_span_cap": header["integration_span_cap"],
                  "min_eligible_for_gates": header["min_eligible_for_gates"],
                  "lax_threshold": header["lax_threshold"], "gates": header["gates"]}
            for k in ("locale", "locale_expect", "reference_answer"):
                if it.get(k) is not None:
                    md[k] = it[k]
            samples.append(Sample(id=it["id"], input=user, target=it.get("reference_answer"), metadata=md,
                                  system=it.get("system"), tools=[schemas[t] for t in it["tools"]] or None,
                                  messages=messages))
        return samples

    def build_messages(self, sample: Sample) -> list[dict[str, Any]]:
        return [dict(m) for m in (sample.messages or [{"role": "user", "content": sample.input}])]

    def slices(self, sample: Sample) -> dict[str, str]:
        out = {"kind": str(sample.metadata.get("kind"))}
        if sample.metadata.get("locale"):
            out["locale"] = str(sample.metadata["locale"])
        out.update(super().slices(sample))
        return out
