"""Config text the tests share: the file benchmark `smoke` over data/smoke/test.jsonl (or a file of the same
columns), which most tests evaluate. A test appends its own `models:` (and anything else) to it."""
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SMOKE_JSONL = REPO / "data" / "smoke" / "test.jsonl"
SMOKE_COLUMNS = "{prompt: question, target: answer, id: id}"


def smoke_benchmark(splits: str | dict[str, int | None] = "extra", *, limit: int | None = None,
                    path: Path | str = SMOKE_JSONL, columns: str = SMOKE_COLUMNS, options: str = "",
                    metrics: str | None = "[exact_match]") -> str:
    """YAML text `benchmarks:` with the file benchmark `smoke`. `splits`: a split name (limited to `limit` samples
    when given), or {name: limit or None}; `options`: more lines under `options:` (YAML, one per line); metrics=None
    leaves `metrics:` out."""
    if isinstance(splits, str):
        splits = {splits: limit}
    lines = ["benchmarks:", "  smoke:", "    adapter: file", "    splits:"]
    for name, n in splits.items():
        lines.append(f"      {name}: {{path: {json.dumps(str(path))}" + (f", limit: {n}}}" if n is not None else "}"))
    lines += ["    options:", f"      columns: {columns}"]
    lines += [f"      {line.strip()}" for line in options.splitlines() if line.strip()]
    if metrics is not None:
        lines.append(f"    metrics: {metrics}")
    return "\n".join(lines) + "\n"


TOOLUSE = REPO / "data" / "tooluse"


def tooluse_benchmark(*, python: bool = False, metrics: str | None = "[exact_match]") -> str:
    """YAML text `benchmarks:` with the shipped tooluse split (data/tooluse) and its replayed tools; python=True
    also offers the python tool."""
    tools = f"fixtures: {TOOLUSE}/fixtures, allowlist: {TOOLUSE}/allowlist.txt, schemas: {TOOLUSE}/tools.json"
    text = (f"benchmarks:\n  tooluse:\n    adapter: file\n    splits: {{test: {{path: {TOOLUSE}/test.jsonl}}}}\n"
            f"    options: {{columns: {SMOKE_COLUMNS}}}\n    tools: {{{tools}{', python: true' if python else ''}}}\n")
    return text + (f"    metrics: {metrics}\n" if metrics is not None else "")
