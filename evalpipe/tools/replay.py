"""`ToolBroker`: tool calls answered from recorded fixtures, deterministic and offline (the default).

Fixtures are a folder of JSONL files, one entry per line: `{"name": "<tool>", "key": {<arguments>}, "result": ...}`.
Keys and calls are normalized the same way before lookup (`normalize_arguments`):
- `q` and `query` string values: lowercased, runs of whitespace collapsed to one space, trimmed;
- tools whose name starts with `web.search`: `top_k` set to 3 when missing or null;
- keys whose value is null dropped;
- key order ignored (canonical JSON with sorted keys).
A call on no fixture answers `{"ok": false, "error": "fixture_miss"}`; a tool not on the allowlist answers
`{"ok": false, "error": "tool_not_allowed"}`. `sha256` covers the allowlist and the normalized fixtures.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from evalpipe.core.errors import ConfigError, DataError
from evalpipe.core.file_caps import DEFAULT_CAP, FileCap, read_text

SEARCH_PREFIX = "web.search"
DEFAULT_TOP_K = 3
QUERY_KEYS = ("q", "query")

FIXTURE_MISS = {"ok": False, "error": "fixture_miss"}
NOT_ALLOWED = {"ok": False, "error": "tool_not_allowed"}


def normalize_arguments(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The lookup form of a call's arguments (rules in the module docstring)."""
    out: dict[str, Any] = {}
    for k, v in arguments.items():
        if v is None:
            continue
        if k in QUERY_KEYS and isinstance(v, str):
            v = " ".join(v.split()).lower()
        out[k] = v
    if name.startswith(SEARCH_PREFIX) and out.get("top_k") is None:
        out["top_k"] = DEFAULT_TOP_K
    return out


# json's C encoder for `canonical`, made once: `json.dumps` with options builds an encoder on every call, most of
# the cost of a small call's key (one per tool call). No cycle check: arguments are decoded JSON.
_c_canonical = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    None, str, json.encoder.encode_basestring, None, ":", ",", True, False, True) \
    if json.encoder.c_make_encoder else None  # type: ignore[attr-defined]


def canonical(obj: Any) -> str:
    """`json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)`, byte for byte."""
    if _c_canonical is None:  # (an interpreter without json's C speedups)
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return "".join(_c_canonical(obj, 0))


def normalized_key(name: str, arguments: dict[str, Any]) -> str:
    """Canonical JSON of the normalized arguments: the `normalized_key` column and the fixture lookup key."""
    return canonical(normalize_arguments(name, arguments))


def read_allowlist(path: Path, cap: FileCap = DEFAULT_CAP) -> list[str]:
    """One tool name per line (`#` comments, blank lines ignored), or a JSON/YAML list of names; read under `cap`."""
    if not path.is_file():
        raise ConfigError(f"tools allowlist {path} not found; give a file with one tool name per line")
    text = read_text(path, cap)
    if path.suffix in (".json", ".yaml", ".yml"):
        import yaml

        names = yaml.safe_load(text) or []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ConfigError(f"tools allowlist {path} must hold a list of tool names")
        return [n.strip() for n in names if n.strip()]
    return [ln.split("#", 1)[0].strip() for ln in text.splitlines() if ln.split("#", 1)[0].strip()]


@dataclass
class Fixture:
    name: str
    key: str  # normalized key (canonical JSON)
    result: Any
    where: str  # file:line, for messages
    raw_key: dict[str, Any] = field(default_factory=dict)


def read_fixtures(folder: Path, cap: FileCap = DEFAULT_CAP) -> list[Fixture]:
    """Every `*.jsonl` file under `folder` (sorted, each read under `cap`), each line `{"name", "key", "result"}`."""
    if not folder.is_dir():
        raise ConfigError(f"tools fixtures folder {folder} not found; give a folder of JSONL files "
                          '(one line per entry: {"name": ..., "key": {...}, "result": ...})')
    out: list[Fixture] = []
    for path in sorted(folder.rglob("*.jsonl")):
        for n, line in enumerate(read_text(path, cap).splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise DataError(f"{where}: not valid JSON ({exc.msg}); each line is one "
                                '{"name": ..., "key": {...}, "result": ...}') from None
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or "result" not in obj:
                raise DataError(f"{where}: a fixture needs \"name\" (string), \"key\" (object) and \"result\"")
            key = obj.get("key") if obj.get("key") is not None else {}
            if not isinstance(key, dict):
                raise DataError(f"{where}: \"key\" must be a JSON object of arguments")
            out.append(Fixture(obj["name"], normalized_key(obj["name"], key), obj["result"], where, key))
    return out


class ToolBroker:
    """Answers replayed tool calls from fixtures; counts hits, misses and disallowed calls."""

    def __init__(self, fixtures: Iterable[Fixture] = (), allowlist: list[str] | None = None):
        self.allowlist = None if allowlist is None else list(allowlist)
        self._allowed = None if allowlist is None else frozenset(allowlist)
        self.table: dict[tuple[str, str], Any] = {}
        self.fixtures: list[Fixture] = []
        seen: dict[tuple[str, str], Fixture] = {}
        for f in fixtures:
            k = (f.name, f.key)
            prev = seen.get(k)
            if prev is not None:
                if canonical(prev.result) != canonical(f.result):
                    raise DataError(f"{f.where}: fixture for {f.name} {f.key} differs from the one at {prev.where} "
                                    "(same arguments after normalization); keep one")
                continue
            seen[k] = f
            self.fixtures.append(f)
            self.table[k] = f.result
        self.names = frozenset(f.name for f in self.fixtures)
        self.hits = self.misses = self.disallowed = 0

    @classmethod
    def from_paths(cls, fixtures: Path | None, allowlist: Path | None, cap: FileCap = DEFAULT_CAP) -> "ToolBroker":
        return cls(read_fixtures(fixtures, cap) if fixtures is not None else (),
                   read_allowlist(allowlist, cap) if allowlist is not None else None)

    def allowed(self, name: str, offered: Iterable[str] = ()) -> bool:
        """On the allowlist; without one, any tool the sample offers or the fixtures know."""
        if self._allowed is not None:
            return name in self._allowed
        return name in self.names or name in set(offered)

    def lookup(self, name: str, key: str) -> tuple[bool, Any]:
        """(hit, result) for a normalized key; a miss gives the fixture_miss answer."""
        k = (name, key)
        if k in self.table:
            self.hits += 1
            return True, self.table[k]
        self.misses += 1
        return False, dict(FIXTURE_MISS)

    def sha256(self) -> str:
        """`tool_registry_sha256`: the allowlist plus the normalized fixtures, order-independent."""
        entries = sorted([f.name, f.key, canonical(f.result)] for f in self.fixtures)
        blob = canonical({"allowlist": sorted(self.allowlist) if self.allowlist is not None else None,
                          "fixtures": entries})
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    # ---- the smoke check ---------------------------------------------------------------------------------------
    def variants(self, f: Fixture) -> list[dict[str, Any]]:
        """Spellings of a fixture's key that must resolve to it: as written, keys reordered, query values
        re-cased and padded, null-valued extras, and (web.search) top_k omitted / null / explicit."""
        base = dict(f.raw_key)
        out = [base, dict(reversed(list(base.items()))), {**base, "unused_null": None}]
        for k in QUERY_KEYS:
            if isinstance(base.get(k), str):
                v = base[k]
                out += [{**base, k: f"  {v.upper()}  "}, {**base, k: "  ".join(v.split()).title()},
                        {**base, k: "\t" + v.replace(" ", "   ") + "\n"}]
        if f.name.startswith(SEARCH_PREFIX):
            norm = json.loads(f.key)
            if norm.get("top_k") == DEFAULT_TOP_K:
                without = {k: v for k, v in base.items() if k != "top_k"}
                out += [without, {**without, "top_k": None}, {**without, "top_k": DEFAULT_TOP_K}]
        return out

    def check(self) -> dict[str, Any]:
        """Hit rate over normalization variants of every fixture key (does not touch the counters)."""
        total = hits = 0
        failures: list[str] = []
        for f in self.fixtures:
            for v in self.variants(f):
                total += 1
                if (f.name, normalized_key(f.name, v)) in self.table:
                    hits += 1
                elif len(failures) < 10:
                    failures.append(f"{f.where}: {f.name} {canonical(v)}")
        return {"fixtures": len(self.fixtures), "variants": total, "hits": hits,
                "hit_rate": hits / total if total else 1.0, "failures": failures}
