"""Tool-integration datasets: a JSONL file whose first line may be `{"__header__": {...}}`, then one item per line,
each validated against `evalpipe/schemas/eval_prompt.schema.json` with `jsonschema`; a bad item names its line and
field. Also the result schema (`eval_result.schema.json`) every sample's record follows."""
from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from evalpipe.core.dataset_header import HEADER_KEY
from evalpipe.core.file_caps import DEFAULT_CAP, FileCap, read_bytes
from evalpipe.core.errors import DataError

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"

# Defaults of the header's settings (docs/metrics.md, tool_integration)
DEFAULTS: dict[str, Any] = {
    "integration_span_cap": 8,
    "min_eligible_for_gates": 10,
    "lax_threshold": 0.6,
    "fail_on_fingerprint_mismatch": False,
    "gates": {
        "controls_with_integration": {"max": 0, "blocking": True},
        "coverage": {"min": 0.95, "blocking": True},
        # the harness's "fixture_miss" troubleshooting row: a miss means a fixture is missing; it fails the gate
        # (the report's gates_ok) without blocking, since a miss may be the item under test (error recovery)
        "fixture_misses": {"max": 0, "blocking": False},
    },
}


@functools.lru_cache(maxsize=None)
def schema(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / name).read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=None)
def _validator(name: str, ref: str | None = None):
    from jsonschema import Draft202012Validator

    s = schema(name)
    if ref:  # a sub-schema of $defs, resolved against the whole document
        s = {"$schema": s["$schema"], "$defs": s["$defs"], "$ref": f"#/$defs/{ref}"}
    Draft202012Validator.check_schema(s)
    return Draft202012Validator(s)


def _field(error: Any) -> str:
    path = "/".join(str(p) for p in error.absolute_path)
    return path or "(the item)"


def first_error(name: str, obj: Any, ref: str | None = None) -> str | None:
    """The first (most specific) schema violation of `obj` as `field 'a/b': message`, or None."""
    from jsonschema.exceptions import best_match

    errors = list(_validator(name, ref).iter_errors(obj))
    if not errors:
        return None
    e = best_match(errors)
    msg = e.message if len(e.message) <= 200 else e.message[:200] + "..."
    return f"field '{_field(e)}': {msg}"


def validate_result(record: dict[str, Any]) -> None:
    """Raise ValueError when a sample's result record does not follow eval_result.schema.json."""
    err = first_error("eval_result.schema.json", record)
    if err:
        raise ValueError(f"tool_integration result of {record.get('id')!r} breaks eval_result.schema.json: {err}")


def read_dataset(path: Path, shown: str | None = None,
                 cap: FileCap = DEFAULT_CAP) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """(header merged over the defaults, items, sha256 of the file bytes), read under `cap`. Raises DataError (one
    line)."""
    shown = shown or str(path)
    if not path.is_file():
        raise DataError(f"{shown}: file not found; fix 'path' in the config")
    data = read_bytes(path, cap, shown)
    sha = hashlib.sha256(data).hexdigest()
    header: dict[str, Any] = {}
    items: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    first = True
    for n, line in enumerate(data.decode("utf-8-sig").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise DataError(f"{shown} line {n}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if isinstance(obj, dict) and HEADER_KEY in obj:
            if not first:
                raise DataError(f"{shown} line {n}: a {HEADER_KEY} line must be the first line of the file")
            err = first_error("eval_prompt.schema.json", obj[HEADER_KEY], "header")
            if err:
                raise DataError(f"{shown} line {n}: header {err}")
            header = dict(obj[HEADER_KEY])
            from evalpipe.tooleval.report import KNOWN_GATES

            unknown = sorted(set(header.get("gates") or {}) - set(KNOWN_GATES))
            if unknown:
                raise DataError(f"{shown} line {n}: header field 'gates': unknown gate(s) {unknown}; known: "
                                f"{', '.join(sorted(KNOWN_GATES))}")
            first = False
            continue
        first = False
        err = first_error("eval_prompt.schema.json", obj)
        if err:
            raise DataError(f"{shown} line {n}: {err}")
        if obj["id"] in seen:
            raise DataError(f"{shown} line {n}: duplicate id {obj['id']!r} (first on line {seen[obj['id']]})")
        seen[obj["id"]] = n
        items.append({**obj, "_line": n})
    if not items:
        raise DataError(f"{shown}: no items (only a header or nothing)")
    merged = {**DEFAULTS, **header}
    merged["gates"] = {**DEFAULTS["gates"], **(header.get("gates") or {})}
    return merged, items, sha
