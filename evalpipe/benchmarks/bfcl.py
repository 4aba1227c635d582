"""The Berkeley Function Calling Leaderboard (BFCL), single-turn AST categories, from its own files.

A split is one BFCL question file: JSON lines with `id`, `question` (a list of turns, each a list of chat
messages) and `function` (the function docs, BFCL's parameter types: `dict`, `float`, `tuple`, `any`, ...), plus
its possible-answer file (JSON lines `{"id", "ground_truth": [{func: {param: [acceptable values]}}]}`), found at
`possible_answer/<same file name>` beside it, as the gorilla repository and the Hugging Face dataset lay them
out. `irrelevance`, `live_irrelevance` and `live_relevance` have no answers.

    bfcl:
      adapter: bfcl
      splits:
        simple: {path: /data/gorilla/berkeley-function-call-leaderboard/bfcl_eval/data/BFCL_v4_simple_python.json}
        parallel: {file: BFCL_v3_parallel.json}         # from the Hub dataset, into the HF cache
      metrics: [bfcl_ast]

Options: `path` (local file or hf:// URI), `answers` (the possible-answer file; default as above), `file` (the
file name in the Hub dataset when there is no `path`; default `BFCL_v3_<split>.json`), `repo_id`, `revision`,
`cache_dir`, `token_env`, `endpoint`, `prompt_style` (`fc`: tools sent as function-tool schemas, the default;
`prompting`: no tools, a system prompt lists the functions and asks for `[func(a=1), ...]`, scored from the text).

Samples: `sample_id` = BFCL `id`; slice `category` = the id without its trailing number; `tools` = the docs
converted to JSON Schema; metadata `functions` (the docs as BFCL wrote them, for the checker) and `category`.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Iterable

from evalpipe.benchmarks import hub
from evalpipe.benchmarks.base import Adapter, register_adapter
from evalpipe.benchmarks.file import resolve_source
from evalpipe.core.errors import ConfigError, DataError
from evalpipe.core.file_caps import DEFAULT_CAP, OPTION, FileCap, read_bytes, split_cap
from evalpipe.tooleval.bfcl_checker import category_of, is_relevance_category
from evalpipe.core.types import Sample

BFCL_REPO = "gorilla-llm/Berkeley-Function-Calling-Leaderboard"
# BFCL's parameter type names -> JSON Schema types (the mapping BFCL applies for OpenAPI-style providers)
JSON_SCHEMA_TYPES = {
    "integer": "integer", "number": "number", "float": "number", "double": "number", "string": "string",
    "boolean": "boolean", "bool": "boolean", "array": "array", "list": "array", "tuple": "array",
    "dict": "object", "object": "object", "any": "string", "byte": "integer", "short": "integer",
    "long": "integer", "char": "string", "String": "string", "Any": "string", "Bigint": "integer",
    "ArrayList": "array", "Array": "array", "Queue": "array", "Stack": "array", "HashMap": "object",
    "Hashtable": "object",
}
UNSUPPORTED = ("multi_turn", "memory", "web_search", "format_sensitivity", "java", "javascript", "exec", "rest",
               "sql", "chatable")
PROMPT_STYLES = ("fc", "prompting")

# BFCL's prompting-mode instructions, in our own words.
PROMPTING_SYSTEM = (
    "You are an expert in composing function calls. You are given a question and a set of possible functions. "
    "Based on the question, make one or more function calls to achieve the purpose. If none of the functions "
    "can be used, say so and call nothing. If the question lacks parameters a function requires, say so.\n"
    "If you decide to call functions, reply with ONLY the calls, in this format: "
    "[func_name1(param_name1=value1, param_name2=value2), func_name2(param=value)]\n"
    "Here is the list of functions you can call, in JSON format:\n{functions}"
)


def to_json_schema(node: Any) -> Any:
    """A BFCL parameter schema with its type names as JSON Schema types (recursively: properties, items);
    `float` also gets `format: float`. Unknown type names become `string`, as BFCL does."""
    if not isinstance(node, dict):
        return node
    out = copy.deepcopy(node)
    t = out.get("type")
    if isinstance(t, str):
        out["type"] = JSON_SCHEMA_TYPES.get(t, "string")
        if t == "float":
            out.setdefault("format", "float")
    elif "type" not in out and ("properties" not in out and "items" not in out):
        out["type"] = "string"
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: to_json_schema(v) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = to_json_schema(out["items"])
    return out


def to_tool(doc: dict) -> dict:
    """One BFCL function doc as an OpenAI function-tool schema (the dataset's name kept, dots and all)."""
    params = to_json_schema(doc.get("parameters") or {"type": "dict", "properties": {}})
    params["type"] = "object"
    params.setdefault("properties", {})
    fn = {"name": doc["name"], "description": doc.get("description", ""), "parameters": params}
    return {"type": "function", "function": fn}


def read_json_lines(path: Path, shown: str, cap: FileCap = DEFAULT_CAP) -> list[tuple[int, dict]]:
    """(line number, object) for each non-empty line; a whole-file JSON array is accepted too. Read whole, under
    `cap`."""
    if not path.is_file():
        raise DataError(f"{shown}: file not found; fix 'path' (or 'answers') in the config")
    text = read_bytes(path, cap, shown).decode("utf-8-sig")
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            arr = json.loads(stripped)
            return [(i + 1, o) for i, o in enumerate(arr)]
        except ValueError:
            pass
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise DataError(f"{shown} line {n}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise DataError(f"{shown} line {n}: expected a JSON object, got {type(obj).__name__}")
        out.append((n, obj))
    if not out:
        raise DataError(f"{shown}: the file has no entries")
    return out


def category_of_file(name: str) -> str:
    """`BFCL_v4_simple_python.json` -> `simple_python` (BFCL's own file naming)."""
    stem = name.split(".")[0]
    parts = stem.split("_", 2)
    return parts[2] if len(parts) == 3 and parts[0] == "BFCL" else stem


def _messages(question: Any, where: str) -> list[dict]:
    if isinstance(question, str):
        return [{"role": "user", "content": question}]
    if isinstance(question, list) and question and all(isinstance(m, dict) for m in question):
        return list(question)
    if isinstance(question, list) and question and all(isinstance(t, list) for t in question):
        if len(question) != 1:
            raise DataError(f"{where}: {len(question)} turns; multi-turn BFCL categories are not supported "
                            f"(bfcl_ast scores single-turn categories)")
        return list(question[0])
    raise DataError(f"{where}: field 'question' must be a list of turns of chat messages")


@register_adapter("bfcl")
class BfclAdapter(Adapter):
    name = "bfcl"
    default_metrics = ["bfcl_ast"]
    option_schema = {"path", "answers", "file", "categories", "repo_id", "revision", "cache_dir", "token_env",
                     "endpoint", "prompt_style", OPTION}

    def _style(self) -> str:
        style = str(self.options.get("prompt_style", "fc"))
        if style not in PROMPT_STYLES:
            raise ConfigError(f"{self.split.key}: prompt_style must be one of {list(PROMPT_STYLES)}, got {style!r}")
        return style

    def _categories(self) -> list[str] | None:
        cats = self.options.get("categories")
        if cats is None:
            return None
        if isinstance(cats, str):
            cats = [cats]
        if not isinstance(cats, list) or not all(isinstance(c, str) and c for c in cats):
            raise ConfigError(f"{self.split.key}: 'categories' must be a list of BFCL category names, e.g. "
                              f"[simple_python, multiple]")
        return list(cats)

    def locate(self) -> list[tuple[Path, str, Path | None, str | None]]:
        """[(question file, shown, answer file or None when there is none, shown)], one per category file."""
        cats = self._categories()
        spec = self.options.get("path")
        if spec and not str(spec).startswith("hf://") and self.split.resolve(str(spec)).is_dir():
            folder = self.split.resolve(str(spec))
            files = sorted(p for p in folder.glob("BFCL_v*_*.json*") if p.is_file())
            found = {category_of_file(p.name): p for p in files}
            if cats is None:
                cats = [c for c in found if not any(u in c for u in UNSUPPORTED)]
            missing = [c for c in cats if c not in found]
            if missing or not cats:
                raise DataError(f"{self.split.key}: no BFCL_v*_<category>.json for {missing or 'any category'} in "
                                f"{folder}; point 'path' at BFCL's data folder or at one question file")
            out = []
            for c in cats:
                q = found[c]
                a = folder / "possible_answer" / q.name
                out.append((q, str(q), a if a.is_file() else None, str(a)))
            return out
        if spec:
            q, shown = resolve_source(spec, self.split.base_dir)
            if self.options.get("answers"):
                a, ashown = resolve_source(self.options["answers"], self.split.base_dir, what="'answers'")
                if not a.is_file():
                    raise DataError(f"{self.split.key}: answers file {ashown} not found; fix 'answers:'")
                return [(q, shown, a, ashown)]
            if str(spec).startswith("hf://"):
                base, _, name = str(spec).rpartition("/")
                try:
                    a, _ = resolve_source(f"{base}/possible_answer/{name}", self.split.base_dir)
                    return [(q, shown, a, f"{base}/possible_answer/{name}")]
                except DataError:
                    return [(q, shown, None, None)]
            a = q.parent / "possible_answer" / q.name
            return [(q, shown, (a if a.is_file() else None), str(a))]
        repo = str(self.options.get("repo_id") or BFCL_REPO)
        names = [f"BFCL_v3_{c}.json" for c in cats] if cats else [str(self.options.get("file") or
                                                                       f"BFCL_v3_{self.split.split}.json")]
        kw = dict(revision=self.options.get("revision"), cache_dir=self.options.get("cache_dir"),
                  token_env=self.options.get("token_env") or "HF_TOKEN", endpoint=self.options.get("endpoint"))
        fix = (f"set 'path:' under the {self.split.benchmark} benchmark to BFCL's data folder or a question file "
               f"(e.g. data/bfcl_sample)")
        out = []
        for name in names:
            q = hub.download_file(repo, name, fix_local=fix, **kw)
            try:
                a = hub.download_file(repo, f"possible_answer/{name}", fix_local=fix, **kw)
            except DataError:
                a = None  # irrelevance categories have no answers; a missing one is reported by load()
            out.append((q, f"{repo}/{name}", a, f"{repo}/possible_answer/{name}"))
        return out

    def load(self) -> Iterable[Sample]:
        style = self._style()
        cats = self._categories()
        samples: list[Sample] = []
        for qfile, shown, afile, ashown in self.locate():
            samples += self._load_file(qfile, shown, afile, ashown, style)
        if cats is not None:
            samples = [s for s in samples if s.metadata["category"] in cats]
        return samples

    def _load_file(self, qfile: Path, shown: str, afile: Path | None, ashown: str | None, style: str) -> list[Sample]:
        cap = split_cap(self.split.key, self.options)
        questions = read_json_lines(qfile, shown, cap)
        answers: dict[str, Any] = {}
        by_index: list[Any] = []
        if afile is not None:
            for n, obj in read_json_lines(afile, ashown or str(afile), cap):
                if "ground_truth" not in obj:
                    raise DataError(f"{ashown} line {n}: no 'ground_truth' field")
                answers[str(obj.get("id"))] = obj["ground_truth"]
                by_index.append(obj["ground_truth"])
        aligned_by_id = all(str(q.get("id")) in answers for _, q in questions)
        samples: list[Sample] = []
        for i, (n, q) in enumerate(questions):
            where = f"{shown} line {n}"
            for key in ("id", "question", "function"):
                if key not in q:
                    raise DataError(f"{where}: no '{key}' field (a BFCL question has id, question, function)")
            sid = str(q["id"])
            category = category_of(sid)
            bad = next((u for u in UNSUPPORTED if u in category), None)
            if bad:
                raise DataError(f"{where}: category {category!r} is not scored by bfcl_ast (single-turn Python AST "
                                f"and relevance categories only: simple_python, multiple, parallel, "
                                f"parallel_multiple, irrelevance and the live_ ones)")
            docs = q["function"]
            if isinstance(docs, dict):
                docs = [docs]
            if not isinstance(docs, list) or not all(isinstance(d, dict) and "name" in d for d in docs):
                raise DataError(f"{where}: field 'function' must be a list of function docs with a 'name'")
            messages = _messages(q["question"], where)
            truth = None
            if not is_relevance_category(category):
                if aligned_by_id:
                    truth = answers.get(sid)
                elif afile is not None and len(by_index) == len(questions):
                    truth = by_index[i]  # BFCL aligns answers with questions by position
                if truth is None:
                    raise DataError(f"{where}: no possible answer for {sid!r} (looked in {ashown}); set 'answers:' "
                                    f"to BFCL's possible_answer file for this category")
            user = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "") or ""
            system = None
            if style == "prompting":
                system = PROMPTING_SYSTEM.format(functions=json.dumps(docs, ensure_ascii=False))
            samples.append(Sample(
                id=sid, input=str(user), target=json.dumps(truth, ensure_ascii=False) if truth is not None else None,
                metadata={"category": category, "functions": docs, "messages": messages}, system=system,
                tools=[to_tool(d) for d in docs] if style == "fc" else None, messages=messages,
            ))
        return samples

    def build_messages(self, sample: Sample) -> list[dict[str, Any]]:
        messages = [dict(m) for m in (sample.messages or sample.metadata.get("messages") or
                                      [{"role": "user", "content": sample.input}])]
        if sample.system:
            if messages and messages[0].get("role") == "system":
                messages[0]["content"] = f"{sample.system}\n\n{messages[0].get('content') or ''}"
            else:
                messages.insert(0, {"role": "system", "content": sample.system})
        return messages

    def slices(self, sample: Sample) -> dict[str, str]:
        out = {"category": str(sample.metadata.get("category") or category_of(sample.id))}
        out.update(super().slices(sample))
        return out
