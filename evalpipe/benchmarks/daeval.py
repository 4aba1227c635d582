"""DAEval (InfiAgent-DABench): data-analysis questions with constraints, answered as `@name[value]`.

The original layout (GitHub InfiAgent/InfiAgent, folder `examples/DA-Agent/data/`, and the Hub dataset
`infiagent/DABench`, which holds the same files):

    da-dev-questions.jsonl   {"id", "question", "concepts": [...], "constraints", "format", "file_name", "level"}
    da-dev-labels.jsonl      {"id", "common_answers": [["name", "value"], ...]}
    da-dev-tables/<file_name>

Labels are optional (a questions file alone gives unscored samples). `common_answers` may also be given as
`@name[value]` text or as the Python-literal text `[['name', 'value']]` (DSGym's spelling): `list_match` reads all
three the same. Metric: `list_match` (accuracy by question; rows `list_match_proportional` and
`list_match_by_subquestion`). Slices: `level=<easy|medium|hard>`, `concept=<each concept>` (a question counts in
every concept it has, as the reference's per-concept accuracy), `concepts=<count>`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from evalpipe.benchmarks import hub
from evalpipe.benchmarks.base import Adapter, register_adapter
from evalpipe.benchmarks.file import read_table
from evalpipe.benchmarks.protocols import (COMMON_OPTIONS, apply_protocol, execute_reply_code, files_block, prepare_split,
                                          protocol_of)
from evalpipe.core.errors import ConfigError, DataError
from evalpipe.core.file_caps import DEFAULT_CAP, FileCap, split_cap
from evalpipe.metrics.list_match import BadReference, parse_gold
from evalpipe.core.types import Sample

DABENCH_REPO = "infiagent/DABench"
QUESTIONS = "da-dev-questions.jsonl"
LABELS = "da-dev-labels.jsonl"
TABLES = "da-dev-tables"

ANSWER_RULES = (
    "You are a data analyst. Answer the question about the data file using the constraints given. Give your final "
    "answer in exactly the format the question asks for: one @answer_name[value] for every answer name in the "
    "format, in that order, e.g. @mean_fare[34.65] @std_fare[12.30]. Write each value bare (no units, no quotes), "
    "rounded as the constraints say."
)


def find_root(p: Path, questions: str) -> Path | None:
    """The folder holding the questions file: the folder itself, its `data/`, or a clone's `examples/DA-Agent/data/`."""
    for folder in (p, p / "data", p / "examples" / "DA-Agent" / "data"):
        if (folder / questions).is_file():
            return folder
    return None


def _labels(path: Path, cap: FileCap = DEFAULT_CAP) -> dict[str, tuple[Any, str]]:
    """id -> (common_answers, where), validated: each must read as [name, value] pairs."""
    table = read_table(path, cap=cap)
    out: dict[str, tuple[Any, str]] = {}
    for i, row in enumerate(table.rows):
        where = f"{table.path} {table.where(i)}"
        if "id" not in row:
            raise DataError(f"{where}: no 'id'; each label line needs 'id' and 'common_answers'")
        answers = row.get("common_answers")
        try:
            parse_gold(answers)
        except BadReference as exc:
            raise DataError(f"{where} (id {row['id']}): common_answers {str(answers)[:120]!r} is {exc}") from None
        out[str(row["id"])] = (answers, where)
    return out


def _target(answers: Any) -> str | None:
    if answers is None:
        return None
    if isinstance(answers, str):
        return answers if answers.strip() else None
    return json.dumps(answers, ensure_ascii=False)


@register_adapter("daeval")
class DAEvalAdapter(Adapter):
    """InfiAgent-DABench from the Hub (`infiagent/DABench`) or the original files (`path:`)."""

    name = "daeval"
    option_schema = {*COMMON_OPTIONS, "questions_file", "labels_file", "tables_dir", "levels"}

    def __init__(self, split):
        super().__init__(split)
        prepare_split(split, self.options)

    def after_rollouts(self, rollouts, prompts):
        """single_turn: the reply's code run once in the sandbox and recorded (protocols.execute_reply_code)."""
        return execute_reply_code(rollouts, prompts, self.options, self.split.key)
    default_metrics = ["list_match"]

    def locate(self) -> Path:
        questions = str(self.options.get("questions_file") or QUESTIONS)
        if self.options.get("path"):
            p = self.split.resolve(self.options["path"])
            if not p.exists():
                raise DataError(f"{self.split.key}: DAEval path {p} does not exist; fix 'path:' or remove it to download "
                                f"{DABENCH_REPO} from the Hub")
            root = find_root(p, questions)
            if root is None:
                raise DataError(f"{self.split.key}: no {questions} under {p} (looked in the folder, data/ and "
                                f"examples/DA-Agent/data/); point 'path:' at the folder holding {questions}, "
                                f"{LABELS} and {TABLES}/")
            return root
        repo = str(self.options.get("repo_id") or DABENCH_REPO)
        root = hub.download_snapshot(
            repo, repo_type="dataset", allow_patterns=[questions, str(self.options.get("labels_file") or LABELS),
                                                       f"{self.options.get('tables_dir') or TABLES}/*"],
            revision=self.options.get("revision"), cache_dir=self.options.get("cache_dir"),
            token_env=self.options.get("token_env") or "HF_TOKEN", endpoint=self.options.get("endpoint"),
            what="the DABench files",
            fix_local="set 'path:' under the daeval benchmark to a local copy (e.g. data/daeval_sample)")
        found = find_root(root, questions)
        if found is None:
            raise DataError(f"{repo} has no {questions}; set 'questions_file:' to its name")
        return found

    def load(self) -> Iterable[Sample]:
        protocol = protocol_of(self.options, self.split.key)
        root = self.locate()
        cap = split_cap(self.split.key, self.options)
        questions = read_table(root / str(self.options.get("questions_file") or QUESTIONS), cap=cap)
        labels_path = root / str(self.options.get("labels_file") or LABELS)
        labels = _labels(labels_path, cap) if labels_path.is_file() else {}
        tables = root / str(self.options.get("tables_dir") or TABLES)
        levels = self.options.get("levels")
        wanted = None if levels is None else {str(x).lower() for x in (levels if isinstance(levels, list) else [levels])}
        samples: list[Sample] = []
        seen: set[str] = set()
        for i, row in enumerate(questions.rows):
            where = f"{questions.path} {questions.where(i)}"
            missing = [k for k in ("id", "question", "file_name") if row.get(k) in (None, "")]
            if missing:
                raise DataError(f"{where}: missing {', '.join(missing)}; a DAEval question needs id, question, "
                                f"constraints, format and file_name")
            sid = str(row["id"])
            if sid in seen:
                raise DataError(f"{where}: duplicate id {sid!r}; ids must be unique")
            seen.add(sid)
            level = str(row.get("level") or "").lower() or None
            if wanted is not None and level not in wanted:
                continue
            data_file = tables / str(row["file_name"])
            if not data_file.is_file():
                raise DataError(f"{where} (id {sid}): data file {row['file_name']!r} not found in {tables}; copy "
                                f"{TABLES}/ next to {questions.path.rsplit('/', 1)[-1]}")
            concepts = row.get("concepts") or []
            if isinstance(concepts, str):
                concepts = [concepts]
            answers = labels.get(sid, (None, ""))[0]
            metadata = {"question": row["question"], "concepts": list(concepts), "constraints": row.get("constraints") or "",
                        "format": row.get("format") or "", "file_name": str(row["file_name"]), "level": level}
            sample = Sample(id=sid, input="", target=_target(answers), metadata=metadata,
                            files=[str(data_file.resolve())])
            sample.input = self.user_turn(metadata, sample.files, protocol)
            samples.append(apply_protocol(sample, self.options, self.split.key, ANSWER_RULES))
        limit = self.options.get("limit")
        if limit is not None:
            try:
                samples = samples[: int(limit)]
            except (TypeError, ValueError):
                raise ConfigError(f"{self.split.key}: 'limit' must be an integer, got {limit!r}") from None
        return samples

    @staticmethod
    def user_turn(m: dict[str, Any], files: list[str], protocol: str) -> str:
        parts = [f"Question: {m['question']}"]
        if m["constraints"]:
            parts.append(f"Constraints: {m['constraints']}")
        if m["format"]:
            parts.append(f"Answer format: {m['format']}")
        parts.append(files_block(files, protocol))
        return "\n\n".join(p for p in parts if p)

    def slices(self, sample: Sample) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if sample.metadata.get("level"):
            out["level"] = sample.metadata["level"]
        concepts = sample.metadata.get("concepts") or []
        if concepts:
            out["concept"] = list(concepts)  # multi-valued: one slice per concept
            out["concepts"] = str(len(concepts))
        out.update(super().slices(sample))
        return out
