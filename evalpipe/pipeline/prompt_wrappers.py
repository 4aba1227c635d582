"""Prompt wrappers: shape the system and user turns of every request of a benchmark or a model.

A wrapper is a file:
- `*.j2` (also `.jinja`, `.jinja2`): a Jinja2 template that renders a JSON object `{"system": ..., "user": ...}`;
  the request gets a system turn (when `system` is non-empty) and a user turn. A template that is itself a JSON
  object (its text starts with `{` and not with `{{`/`{%`/`{#`) gets every `{{ ... }}` value JSON-escaped, so
  the plain `{"system": "{{ system }}", "user": "Q: {{ user }}"}` works for text holding quotes, backslashes or
  newlines; `tojson` (which renders a whole JSON value, quotes included) is left as it is:
  `{"system": {{ system | tojson }}, "user": {{ ("Q: " ~ user) | tojson }}}`.
- `*.tmpl`: flat text with `$system`, `$user`, `$tools` (`string.Template`); the rendered text is the single
  user turn (no separate system turn).

Variables: `system` (the sample's system message, else the wrapper's `system:` setting, else
`DEFAULT_SYSTEM`), `user` (the dataset prompt), `tools` (the sample's tool schemas: a list in Jinja2, JSON text
in `.tmpl`; empty when none). Where a wrapper comes from, first match wins: `--prompt-wrapper` on the CLI (a runner
option), the model's `prompt_wrapper`, the benchmark's (or split's) `prompt_wrapper`. Its value is a path
(relative to the config file) or `{path: ..., system: "..."}`.

The wrapper's SHA-256 (of the file's bytes plus the `system` setting) is `prompt_wrapper_sha256`, part of the
runner fingerprint and of every prompt's fingerprint: changing the wrapper re-runs the rollouts.
Samples given as native chat messages (`columns: {messages: ...}`) are sent as they are, unwrapped.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from evalpipe.core.errors import ConfigError, DataError
from evalpipe.core.fingerprint import canonical_json

DEFAULT_SYSTEM = "You are a helpful assistant."
JINJA_SUFFIXES = (".j2", ".jinja", ".jinja2")
TMPL_SUFFIXES = (".tmpl",)
OPTION = "prompt_wrapper"


@dataclass(frozen=True)
class PromptWrapper:
    path: str
    engine: str  # "jinja2" | "string"
    source: str
    system: str | None  # the configured default system message (None: DEFAULT_SYSTEM)
    sha256: str

    @functools.cached_property
    def _template(self) -> Any:
        """The parsed template, once per wrapper (compiling a Jinja2 template per sample cost ~1 ms each)."""
        if self.engine == "string":
            return string.Template(self.source)
        import jinja2

        finalize = _json_string_escape if is_json_object_template(self.source) else None
        env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, finalize=finalize)
        return env.from_string(self.source)

    def render(self, user: str, system: str | None = None, tools: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """The chat messages for one sample."""
        sys_msg = system if system else (self.system if self.system is not None else DEFAULT_SYSTEM)
        if self.engine == "string":
            try:
                text = self._template.substitute(
                    system=sys_msg, user=user, tools=json.dumps(tools, ensure_ascii=False) if tools else "")
            except (KeyError, ValueError) as exc:
                raise DataError(f"prompt wrapper {self.path}: unknown placeholder {exc}; use $system, $user, "
                                "$tools ($$ for a literal $)") from None
            return [{"role": "user", "content": text.rstrip("\n")}]
        import jinja2

        try:
            out = self._template.render(system=sys_msg, user=user, tools=tools or [])
        except jinja2.TemplateError as exc:
            raise DataError(f"prompt wrapper {self.path}: {type(exc).__name__}: {exc}") from None
        try:
            obj = json.loads(out)
        except json.JSONDecodeError as exc:
            raise DataError(f"prompt wrapper {self.path} must render a JSON object {{\"system\": ..., \"user\": ...}} "
                            f"({exc.msg} at column {exc.colno}; put each value in quotes, \"{{{{ user }}}}\", or "
                            "use the tojson filter unquoted, {{ user | tojson }})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("user"), str):
            raise DataError(f"prompt wrapper {self.path} must render a JSON object with a string \"user\" "
                            "(and optionally \"system\")")
        messages = []
        if obj.get("system"):
            messages.append({"role": "system", "content": str(obj["system"])})
        messages.append({"role": "user", "content": obj["user"]})
        return messages


def is_json_object_template(source: str) -> bool:
    """True for a template written as a JSON object (`{"user": "{{ user }}"}`), not one that starts with a Jinja2
    tag (`{% set ... %}`), whose output can't be told apart from its JSON."""
    head = source.lstrip()
    return head.startswith("{") and not head.startswith(("{{", "{%", "{#"))


def _json_string_escape(value: Any) -> Any:
    """Jinja2's `finalize` for a JSON-object template: each `{{ ... }}` value as the inside of a JSON string
    (quotes, backslashes, newlines escaped). `tojson`'s output (markupsafe.Markup, a whole JSON value) is kept."""
    from markupsafe import Markup

    if isinstance(value, Markup):
        return value
    return json.dumps(value if isinstance(value, str) else str(value), ensure_ascii=False)[1:-1]


def _spec_parts(spec: Any) -> tuple[str, str | None]:
    if isinstance(spec, str) and spec.strip():
        return spec.strip(), None
    if isinstance(spec, Mapping) and isinstance(spec.get("path"), str):
        unknown = set(spec) - {"path", "system"}
        if unknown:
            raise ConfigError(f"prompt_wrapper has unknown key(s) {sorted(unknown)}; allowed: path, system")
        system = spec.get("system")
        return spec["path"], None if system is None else str(system)
    raise ConfigError(f"prompt_wrapper must be a .j2/.tmpl path or {{path: ..., system: ...}}, got {spec!r}")


def load_wrapper(spec: Any, base_dir: str | os.PathLike) -> PromptWrapper:
    path_s, system = _spec_parts(spec)
    p = Path(os.path.expandvars(path_s)).expanduser()
    p = p if p.is_absolute() else (Path(base_dir) / p).resolve()
    suffix = p.suffix.lower()
    if suffix not in JINJA_SUFFIXES + TMPL_SUFFIXES:
        raise ConfigError(f"prompt wrapper {p}: the name must end in .j2 (JSON system/user) or .tmpl (flat text)")
    if not p.is_file():
        raise ConfigError(f"prompt wrapper file {p} not found; fix 'prompt_wrapper' (or --prompt-wrapper)")
    data = p.read_bytes()
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"prompt wrapper {p}: not UTF-8 text; re-save it as UTF-8") from None
    engine = "jinja2" if suffix in JINJA_SUFFIXES else "string"
    if engine == "jinja2":
        import jinja2

        try:
            jinja2.Environment().parse(source)
        except jinja2.TemplateSyntaxError as exc:
            raise ConfigError(f"prompt wrapper {p} line {exc.lineno}: invalid Jinja2: {exc.message}") from None
    elif hasattr(string.Template, "is_valid") and not string.Template(source).is_valid():
        raise ConfigError(f"prompt wrapper {p}: invalid placeholder; use $system, $user, $tools ($$ for a literal $)")
    h = hashlib.sha256(data)
    if system is not None:  # the configured system message changes the prompts too
        h.update(b"\0system\0" + system.encode("utf-8"))
    return PromptWrapper(path=str(p), engine=engine, source=source, system=system, sha256=h.hexdigest())


def wrapper_spec(split_options: Mapping[str, Any], model_options: Mapping[str, Any] | None) -> Any:
    """The wrapper in force for a partition: the model's (a CLI --prompt-wrapper lands there), else the split's."""
    if model_options and model_options.get(OPTION):
        return model_options[OPTION]
    return split_options.get(OPTION) or None


def wrapper_for(split: Any, model: Any | None) -> PromptWrapper | None:
    spec = wrapper_spec(split.options, getattr(model, "options", None))
    return load_wrapper(spec, split.base_dir) if spec else None


def wrapper_identity(w: PromptWrapper | None) -> str | None:
    return w.sha256 if w is not None else None


__all__ = ["DEFAULT_SYSTEM", "PromptWrapper", "canonical_json", "load_wrapper", "wrapper_for", "wrapper_spec"]
