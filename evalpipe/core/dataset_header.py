"""A dataset header: the expected fingerprints (and gates, version) a data file carries for itself, as its first
JSONL line `{"__header__": {...}}`, as the first element of a JSON array, or in a sidecar `<data file>.header.json`
for any format (docs/reproducibility.md). Here is how a header is found and read; what it pins and how it is
checked is evalpipe/pipeline/fingerprints.py. It sits in the base so that the adapters reading data files
(evalpipe/benchmarks/file.py) and the fingerprint checks above them share one reader.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from evalpipe.core.errors import DataError

HEADER_KEY = "__header__"
SIDECAR_SUFFIX = ".header.json"


def sidecar_path(data_path: str | os.PathLike) -> Path:
    return Path(str(data_path) + SIDECAR_SUFFIX)


def parse_header(obj: Any, where: str) -> dict[str, Any]:
    """A header object (`{"__header__": {...}}` or its inside) as a flat dict: the pinned fingerprints at top
    level (also accepted nested under `fingerprints`), plus `gates`, `version` and anything else as given."""
    if isinstance(obj, dict) and HEADER_KEY in obj:
        obj = obj[HEADER_KEY]
    if not isinstance(obj, dict):
        raise DataError(f"{where}: the dataset header must be a JSON object, got {type(obj).__name__}")
    out = {k: v for k, v in obj.items() if k != "fingerprints"}
    nested = obj.get("fingerprints") or {}
    if not isinstance(nested, dict):
        raise DataError(f"{where}: the header's 'fingerprints' must be an object of name -> value")
    for k, v in nested.items():
        out.setdefault(k, v)
    return out


def read_sidecar(data_path: str | os.PathLike) -> dict[str, Any] | None:
    p = sidecar_path(data_path)
    if not p.is_file():
        return None
    try:
        return parse_header(json.loads(p.read_text(encoding="utf-8")), str(p))
    except json.JSONDecodeError as exc:
        raise DataError(f"{p}: the header sidecar is not valid JSON ({exc.msg} at line {exc.lineno})") from None
