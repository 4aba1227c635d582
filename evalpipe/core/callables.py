"""The identity of a Python callable (an agent, a metric, a tool given as a function): its source text, plus the
plain constants it reads from its closure and module globals.

It is hashed into rollout and judgement fingerprints, so re-running an unchanged function resumes from the journal
(no calls) while an edited body, or a changed constant such as `THRESHOLD = 0.5`, is a new identity. Objects that
are not plain constants (clients, models, data frames) are left out: hashing them is neither cheap nor stable.
"""
from __future__ import annotations

import inspect
import textwrap
from typing import Any, Callable

from evalpipe.core.fingerprint import fingerprint

_PLAIN = (str, int, float, bool, bytes, type(None))
_MAX_CONSTANT_CHARS = 10_000  # a long string or list constant is hashed, not copied whole into the identity


def callable_name(fn: Any) -> str:
    """`fn`'s own name: a function's `__name__`, a class's, or the class of a callable object."""
    target = fn if inspect.isfunction(fn) or inspect.isclass(fn) or inspect.ismethod(fn) else type(fn)
    return str(getattr(target, "__name__", None) or type(fn).__name__)


def _plain(value: Any) -> bool:
    """An immutable plain value. Mutable ones (a list or dict the function appends to, a call counter) are left
    out: they change as the function runs, and its identity must not."""
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, (tuple, frozenset)):
        return len(value) <= 1000 and all(isinstance(v, _PLAIN) for v in value)
    return False


def _constant(value: Any) -> Any:
    if isinstance(value, frozenset):
        value = sorted(value, key=repr)
    text = repr(value)
    return value if len(text) <= _MAX_CONSTANT_CHARS else fingerprint(text)


def source_text(fn: Any) -> str:
    """The source of `fn` (dedented), or of its code object when the source can't be read (a function made by
    `exec`, a REPL without history): then the bytecode and constants stand in for it."""
    target = inspect.unwrap(fn) if callable(fn) else fn
    if not (inspect.isfunction(target) or inspect.isclass(target) or inspect.ismethod(target)):
        target = type(target)  # a callable object: its class's source
    try:
        return textwrap.dedent(inspect.getsource(target))
    except (OSError, TypeError):
        code = getattr(target, "__code__", None)
        if code is None:
            return f"<no source: {getattr(target, '__qualname__', target)!r}>"
        return f"<code {code.co_code.hex()} {code.co_consts!r} {code.co_names!r}>"


def read_constants(fn: Any) -> dict[str, Any]:
    """The plain values `fn` reads from its closure cells and from its module's globals (by name)."""
    target = inspect.unwrap(fn) if callable(fn) else fn
    code = getattr(target, "__code__", None)
    if code is None:
        return {}
    out: dict[str, Any] = {}
    for name, cell in zip(code.co_freevars, getattr(target, "__closure__", None) or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell (a name assigned after the function was made)
            continue
        if _plain(value):
            out[f"closure.{name}"] = _constant(value)
    module_globals = getattr(target, "__globals__", {})
    for name in code.co_names:
        if name in module_globals and _plain(module_globals[name]):
            out[f"global.{name}"] = _constant(module_globals[name])
    return out


def callable_fingerprint(fn: Callable[..., Any] | Any, length: int = 16) -> str:
    """A short hash of `fn`'s name, source and the plain constants it reads (see the module docstring)."""
    return fingerprint({"name": callable_name(fn), "source": source_text(fn), "constants": read_constants(fn)},
                       length)
