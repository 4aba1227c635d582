"""Prompt templates: Jinja2 (`.j2`) or `string.Template` (`.tmpl`), from a file or written inline in the config.

How a `prompt_template` value is read:
- a single line ending in `.j2`, `.jinja`, `.jinja2` or `.tmpl` is a file path (relative to the config file);
  its suffix picks the engine;
- anything else is the template itself: Jinja2 when it contains `{{` or `{%`, else `string.Template` (`$name`).
Variables missing at render time are errors (Jinja2 runs with StrictUndefined), never silently empty text.
"""
from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from evalpipe.core.errors import ConfigError
from evalpipe.core.file_caps import DEFAULT_CAP, FileCap, read_text

JINJA_SUFFIXES = (".j2", ".jinja", ".jinja2")
TMPL_SUFFIXES = (".tmpl",)


class TemplateRenderError(Exception):
    """A template could not be rendered for one row; the caller adds the file and row to the message."""


@dataclass
class PromptTemplate:
    source: str  # the template text
    engine: str  # "jinja2" | "string"
    origin: str  # the file it came from, or "inline"
    _render: Callable[[dict[str, Any]], str]

    def render(self, variables: dict[str, Any]) -> str:
        # a template file's final newline is not part of the prompt (the same for both engines)
        return self._render(variables).rstrip("\n")


def _jinja(text: str, origin: str) -> Callable[[dict[str, Any]], str]:
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False)
    try:
        tpl = env.from_string(text)
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(f"prompt template {origin} line {exc.lineno}: invalid Jinja2: {exc.message}") from None

    def render(variables: dict[str, Any]) -> str:
        try:
            return tpl.render(**variables)
        except jinja2.UndefinedError as exc:
            raise TemplateRenderError(f"template {origin}: {exc.message}; available: {', '.join(sorted(variables))}") from None
        except Exception as exc:  # a filter or expression failing on this row's values
            raise TemplateRenderError(f"template {origin}: {type(exc).__name__}: {exc}") from None

    return render


def _string_template(text: str, origin: str) -> Callable[[dict[str, Any]], str]:
    tpl = string.Template(text)
    if hasattr(tpl, "is_valid") and not tpl.is_valid():
        raise ConfigError(f"prompt template {origin}: invalid string.Template placeholder; use $name or ${{name}}, "
                          f"and $$ for a literal $")

    def render(variables: dict[str, Any]) -> str:
        try:
            return tpl.substitute({k: "" if v is None else v for k, v in variables.items()})
        except KeyError as exc:
            raise TemplateRenderError(f"template {origin}: no variable ${exc.args[0]}; "
                                      f"available: {', '.join(sorted(variables))}") from None

    return render


def _looks_like_path(spec: str) -> bool:
    s = spec.strip()
    return "\n" not in s and s.lower().endswith(JINJA_SUFFIXES + TMPL_SUFFIXES)


def load_template(spec: str, base_dir: Path, cap: FileCap = DEFAULT_CAP) -> PromptTemplate:
    """Build a template from a config value (a file path, read under `cap`, or the template text)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"prompt_template must be a file path (.j2/.tmpl) or the template text, got {spec!r}")
    if _looks_like_path(spec):
        path = Path(spec.strip()).expanduser()
        path = path if path.is_absolute() else (base_dir / path).resolve()
        if not path.is_file():
            raise ConfigError(f"prompt template file {path} not found; fix 'prompt_template' in the config")
        try:
            text = read_text(path, cap)
        except UnicodeDecodeError as exc:
            raise ConfigError(f"prompt template file {path}: not UTF-8 text (byte {exc.start}); re-save it as UTF-8") from None
        engine = "jinja2" if path.suffix.lower() in JINJA_SUFFIXES else "string"
        origin = str(path)
    else:
        text = spec
        engine = "jinja2" if ("{{" in spec or "{%" in spec) else "string"
        origin = "inline"
    render = _jinja(text, origin) if engine == "jinja2" else _string_template(text, origin)
    return PromptTemplate(source=text, engine=engine, origin=origin, _render=render)
