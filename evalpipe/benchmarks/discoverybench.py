"""DiscoveryBench: data-driven hypothesis discovery. Each task is a set of dataset files with descriptions, a query,
and a gold hypothesis; the model answers with a hypothesis in natural language.

The original layout (GitHub allenai/discoverybench, mirrored on the Hub as `allenai/discoverybench`):

    discoverybench/<real|synth>/<train|dev|test>/<dataset>/metadata_<id>.json   (+ the dataset files beside it)
    eval/answer_key_<real|synth>.csv        columns dataset, metadataid, query_id, gold_hypo (the test answers)

A `metadata_<id>.json` holds `domain`, `workflow_tags`, `domain_knowledge`, `datasets` ([{name, description,
columns: {raw: [{name, description}]}}]; synth: `columns` is the list), `workflow` (train), and `queries`
(lists of `{qid, question, question_type, true_hypothesis?}`). The gold hypothesis is the query's
`true_hypothesis` when present (train), else the answer key's `gold_hypo`; without either the sample is unscored.

Metrics: `llm_score` (DiscoveryBench's discrete LLM verdict) and `hms_score` (the hypothesis matching score).
Slices: `domain=<domain>`.
"""
from __future__ import annotations

import csv
import json
import io
from pathlib import Path
from typing import Any, Iterable

from evalpipe.benchmarks import hub
from evalpipe.benchmarks.base import Adapter, register_adapter
from evalpipe.benchmarks.protocols import (COMMON_OPTIONS, apply_protocol, execute_reply_code, files_block, prepare_split,
                                          protocol_of)
from evalpipe.core.errors import ConfigError, DataError
from evalpipe.core.file_caps import DEFAULT_CAP, FileCap, read_bytes, split_cap
from evalpipe.core.types import Sample
from evalpipe.metrics.hms import extract_hypothesis  # the HMS metric reads the same reply format

DISCOVERYBENCH_REPO = "allenai/discoverybench"
KINDS = ("real", "synth")

ANSWER_RULES = (
    "You are a scientist analysing data to answer a research query. Find what the data supports and state it as a "
    "scientific hypothesis: the variables involved, the relationship between them (direction, form, size), and the "
    "context in which it holds. End your reply with\nHYPOTHESIS: <one or two sentences>\nWORKFLOW: <the analysis "
    "steps you took, briefly>"
)

def datasets_for_judge(meta: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The dataset descriptions the judge sees, built as DiscoveryBench's evaluation builds them
    (description plus column names and descriptions; `columns.raw` for real tasks, `columns` for synth)."""
    out = []
    for d in meta.get("datasets") or []:
        cols = d.get("columns") or {}
        cols = cols.get("raw", []) if isinstance(cols, dict) else cols
        out.append({"dataset_description": d.get("description", ""),
                    "columns": [{"name": c.get("name"), "description": c.get("description")} for c in cols
                                if isinstance(c, dict)]})
    return out


def find_split_dir(root: Path, kind: str, split: str) -> Path | None:
    for c in (root / "discoverybench" / kind / split, root / kind / split, root / split):
        if c.is_dir():
            return c
    return None


def read_answer_key(path: Path, cap: FileCap = DEFAULT_CAP) -> dict[tuple[str, str, str], str]:
    rows = None
    try:
        data = read_bytes(path, cap)
    except OSError as exc:
        raise DataError(f"{path}: cannot read the answer key ({exc})") from None
    for encoding in ("utf-8", "cp1252"):  # the published synth key is not UTF-8 (Windows quotes)
        try:
            rows = list(csv.DictReader(io.StringIO(data.decode(encoding), newline="")))
            break
        except UnicodeDecodeError:
            continue
        except csv.Error as exc:
            raise DataError(f"{path}: cannot read the answer key ({exc})") from None
    if rows is None:
        raise DataError(f"{path}: the answer key is neither UTF-8 nor Windows-1252 text; re-save it as UTF-8")
    need = {"dataset", "metadataid", "query_id", "gold_hypo"}
    if rows and not need <= set(rows[0]):
        raise DataError(f"{path}: the answer key needs columns {', '.join(sorted(need))}; found {', '.join(rows[0])}")
    return {(r["dataset"], str(r["metadataid"]).strip(), str(r["query_id"]).strip()): r["gold_hypo"] for r in rows}


@register_adapter("discoverybench")
class DiscoveryBenchAdapter(Adapter):
    """DiscoveryBench from the original files (`path:`) or the Hub (`allenai/discoverybench`)."""

    name = "discoverybench"
    option_schema = {*COMMON_OPTIONS, "kind", "hf_split", "answer_key", "domain_knowledge", "domains"}

    def __init__(self, split):
        super().__init__(split)
        prepare_split(split, self.options)

    def after_rollouts(self, rollouts, prompts):
        """single_turn: the reply's code run once in the sandbox and recorded (protocols.execute_reply_code)."""
        return execute_reply_code(rollouts, prompts, self.options, self.split.key)
    default_metrics = ["llm_score", "hms_score"]

    def _kind(self) -> str:
        kind = str(self.options.get("kind") or "real")
        if kind not in KINDS:
            raise ConfigError(f"{self.split.key}: 'kind' must be real or synth, not {kind!r}")
        return kind

    def locate(self) -> tuple[Path, Path]:
        """(split folder, dataset root)."""
        kind, split = self._kind(), str(self.options.get("hf_split") or self.split.split)
        if self.options.get("path"):
            root = self.split.resolve(self.options["path"])
            if not root.exists():
                raise DataError(f"{self.split.key}: DiscoveryBench path {root} does not exist; fix 'path:' (a clone of "
                                f"allenai/discoverybench) or remove it to download {DISCOVERYBENCH_REPO}")
        else:
            root = hub.download_snapshot(
                str(self.options.get("repo_id") or DISCOVERYBENCH_REPO), repo_type="dataset",
                revision=self.options.get("revision"), cache_dir=self.options.get("cache_dir"),
                token_env=self.options.get("token_env") or "HF_TOKEN", endpoint=self.options.get("endpoint"),
                what="the DiscoveryBench files",
                fix_local="set 'path:' under the discoverybench benchmark to a clone of github.com/allenai/discoverybench "
                          "(e.g. data/discoverybench_sample)")
        found = find_split_dir(root, kind, split)
        if found is None:
            raise DataError(f"{self.split.key}: no {kind}/{split}/ folder under {root} (looked for "
                            f"discoverybench/{kind}/{split}/ and {kind}/{split}/); set 'kind:' and 'hf_split:', or "
                            f"point 'path:' at a clone of github.com/allenai/discoverybench")
        return found, root

    def load(self) -> Iterable[Sample]:
        protocol = protocol_of(self.options, self.split.key)
        kind = self._kind()
        split_dir, root = self.locate()
        key_path = self.options.get("answer_key")
        key_file = self.split.resolve(key_path) if key_path else root / "eval" / f"answer_key_{kind}.csv"
        if key_path and not key_file.is_file():
            raise DataError(f"{self.split.key}: answer key {key_file} not found; fix 'answer_key:'")
        cap = split_cap(self.split.key, self.options)
        answers = read_answer_key(key_file, cap) if key_file.is_file() else {}
        with_knowledge = bool(self.options.get("domain_knowledge", False))
        samples: list[Sample] = []
        for meta_file in sorted(split_dir.glob("*/metadata_*.json"), key=lambda p: (p.parent.name, _num(p.stem))):
            try:
                meta = json.loads(_read_text(meta_file, cap))
            except OSError as exc:
                raise DataError(f"{meta_file}: cannot read the file ({exc})") from None
            except json.JSONDecodeError as exc:
                raise DataError(f"{meta_file} line {exc.lineno}: not valid JSON ({exc.msg})") from None
            dataset = meta_file.parent.name
            # the file's number, as the answer key's `metadataid` (the JSON's own `id` repeats across files)
            metadata_id = meta_file.stem.split("_")[-1]
            files = []
            for d in meta.get("datasets") or []:
                f = meta_file.parent / str(d.get("name", ""))
                if not f.is_file():
                    raise DataError(f"{meta_file}: dataset file {d.get('name')!r} not found beside it")
                files.append(str(f.resolve()))
            for group in meta.get("queries") or []:
                for q in (group if isinstance(group, list) else [group]):
                    qid = str(q.get("qid", ""))
                    gold = q.get("true_hypothesis") or answers.get((dataset, metadata_id, qid))
                    metadata = {
                        "domain": meta.get("domain"), "dataset": dataset, "metadata_id": metadata_id, "query_id": qid,
                        "question_type": q.get("question_type"), "query": q.get("question", ""), "kind": kind,
                        "workflow_tags": meta.get("workflow_tags"), "workflow": meta.get("workflow", ""),
                        "datasets": datasets_for_judge(meta, kind),
                        "domain_knowledge": meta.get("domain_knowledge", "") if with_knowledge else "",
                    }
                    sample = Sample(id=f"{dataset}/{metadata_id}/{qid}", input="", target=gold or None,
                                    metadata=metadata, files=list(files))
                    sample.input = self.user_turn(meta, metadata, files, protocol)
                    samples.append(apply_protocol(sample, self.options, self.split.key, ANSWER_RULES))
        if not samples:
            raise DataError(f"{split_dir}: no metadata_<id>.json with queries found")
        domains = self.options.get("domains")
        if domains is not None:
            wanted = set(domains if isinstance(domains, list) else [domains])
            samples = [s for s in samples if s.metadata["domain"] in wanted]
        if self.options.get("limit") is not None:
            samples = samples[: int(self.options["limit"])]
        return samples

    @staticmethod
    def user_turn(meta: dict[str, Any], m: dict[str, Any], files: list[str], protocol: str) -> str:
        lines = []
        for d, ds in zip(meta.get("datasets") or [], m["datasets"]):
            lines.append(f"Dataset {d.get('name')}: {ds['dataset_description']}".strip())
            lines += [f"  - {c['name']}: {c['description']}" for c in ds["columns"]]
        parts = ["\n".join(lines), files_block(files, protocol)]
        if m["domain_knowledge"]:
            parts.append(f"Domain knowledge: {m['domain_knowledge']}")
        parts.append(f"Query: {m['query']}")
        return "\n\n".join(p for p in parts if p)

    def extract_answer(self, output: str | None) -> str | None:
        return extract_hypothesis(output)

    def slices(self, sample: Sample) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if sample.metadata.get("domain"):
            out["domain"] = str(sample.metadata["domain"])
        out.update(super().slices(sample))
        return out


def _read_text(path: Path, cap: FileCap = DEFAULT_CAP) -> str:
    """UTF-8, else Windows-1252: some published synth files are the latter (curly quotes, the micro sign)."""
    data = read_bytes(path, cap)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def _num(stem: str) -> int:
    tail = stem.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else 0
