"""DSGym's Bio dataset (DSBio): computational-biology questions over single-cell data files, `adapter: bio`.

The format, as DSGym's own loader reads it (`dsgym/datasets/loaders/dsbio.py`, dataset name `dsbio`): a JSON array
of `{"context", "question", "answer", "answer_guideline", "data": [paths], "data_link": [urls], "metadata": {"domain",
"paper_title", "reference", ...}}`. The answer may be a string or a JSON list (e.g. gene symbols); the ground truth
is `str(answer)`, so a list is the Python text `['CST3', 'FTL']`, as DSGym writes it. Splits as
DSGym selects them: `hard` reads `dsbio-hard.json` (DSGym's repository ships the same questions as `dsbio.json`,
read when `dsbio-hard.json` is absent); `easy` is not implemented upstream (an error here too); anything else is
an error naming the splits. DSGym's prompt is kept in its structure: the question, `DOMAIN:` (metadata.domain,
default "computational biology"), `ANSWER GUIDELINES:` (answer_guideline), the data files; `context` is carried in
the metadata but, as in DSGym, not shown. Sample ids are the questions' positions (DSGym's `id`); every sample's
metadata has `source: dsbio`.

Metric `dsgym_exact_match` (registered here): DSGym's `exact_match` (`dsgym/eval/metrics/exact_match.py`) with the
dsbio config (`numeric_tolerance: 0`), semantics as they are (`dsgym_exact_match()` below): equal after strip and
lowercase; else two Python list literals are right when their lowercased items are the same sets (`['b', 'A']` is
right for `['a', 'b']`); else numbers within the relative tolerance, strictly (so with 0, `42.0` is wrong for `42`).

Data files: DSGym's paths (`/data/dsbio/<rel>` or `/data/bio/<rel>`) are found under `data_dir:` (default: the
JSON file's folder) by their path below `/data/` or `/data/dsbio/`, then by file name; a missing one fails the load.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any, Iterable

from evalpipe.benchmarks.base import Adapter, read_json_array, files_version, register_adapter
from evalpipe.benchmarks.protocols import (COMMON_OPTIONS, apply_protocol, execute_reply_code, files_block, prepare_split,
                                          protocol_of)
from evalpipe.benchmarks.qrdata import extract_final
from evalpipe.core.errors import ConfigError, DataError
from evalpipe.core.file_caps import split_cap
from evalpipe.core.types import Sample, Score
from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.metrics.settings import DsgymExactMatchSettings

SPLIT_FILES = {"hard": ("dsbio-hard.json", "dsbio.json")}  # DSGym's file, then the name its repository ships
DSGYM_SPLITS = ("hard", "easy")
SOURCE = "dsbio"
DEFAULT_DOMAIN = "computational biology"

ANSWER_RULES = (
    "You are a computational biologist answering a question about the biological datasets named below. Load them "
    "and explore their metadata first; they can be large, so check the size of anything before printing it. Use "
    "the statistical methods the question's field would use, then end your reply with one line of the form\n"
    "FINAL ANSWER: <answer>\nformatted exactly as the answer guidelines ask."
)


def _strip_data_root(path: str) -> str:
    """DSGym's absolute container path as a path below the data folder (`/data/dsbio/x` and `/data/x` -> `x`
    and `bio/x`); any other path as it is."""
    for prefix in ("/data/dsbio/", "/data/"):
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


@register_adapter("bio")
class BioAdapter(Adapter):
    """DSGym's Bio (DSBio) questions from a local copy (`path:` a folder or the JSON file; `data_dir:` the data)."""

    name = "bio"
    # (no Hub options: DSGym's Bio set is published in its GitHub repository, read from a local copy)
    option_schema = {*(o for o in COMMON_OPTIONS if o not in ("repo_id", "revision", "cache_dir", "token_env",
                                                              "endpoint")), "data_dir"}
    default_metrics = [{"name": "dsgym_exact_match", "numeric_tolerance": 0.0}]  # DSGym's dsbio metric config

    def __init__(self, split):
        super().__init__(split)
        prepare_split(split, self.options)

    def after_rollouts(self, rollouts, prompts):
        """single_turn: the reply's code run once in the sandbox and recorded (protocols.execute_reply_code)."""
        return execute_reply_code(rollouts, prompts, self.options, self.split.key)

    def questions_file(self) -> Path:
        name = self.split.split
        if name == "easy":
            raise ConfigError(f"{self.split.key}: DSGym's Bio `easy` split is not implemented (DSGym raises "
                              "NotImplementedError too); use the split `hard`")
        if name not in SPLIT_FILES:
            raise ConfigError(f"{self.split.key}: DSGym's Bio has no split {name!r}; its splits are "
                              f"{', '.join(DSGYM_SPLITS)} (only `hard` is implemented): name the split `hard`")
        if not self.options.get("path"):
            raise ConfigError(f"{self.split.key}: set 'path:' to a folder holding {SPLIT_FILES[name][0]} (DSGym's "
                              "data/task/dsbio/) or to the JSON file itself")
        p = self.split.resolve(self.options["path"])
        if p.is_file():
            return p
        for fname in SPLIT_FILES[name]:
            if (p / fname).is_file():
                return p / fname
        raise DataError(f"{self.split.key}: no {' or '.join(SPLIT_FILES[name])} in {p}; fix 'path:' (DSGym's "
                        "data/task/dsbio/ folder, or the JSON file)")

    def data_root(self, qfile: Path) -> Path:
        return self.split.resolve(self.options["data_dir"]) if self.options.get("data_dir") else qfile.parent

    def source_version(self) -> str | None:
        try:
            return files_version([self.questions_file()])
        except (ConfigError, DataError):
            return None

    def load(self) -> Iterable[Sample]:
        protocol = protocol_of(self.options, self.split.key)
        qfile = self.questions_file()
        items = read_json_array(qfile, "questions (DSGym's dsbio format)", split_cap(self.split.key, self.options))
        root = self.data_root(qfile)
        limit = self.options.get("limit")
        samples = []
        for i, item in enumerate(items[: int(limit)] if limit is not None else items):
            where = f"{qfile} question {i + 1}"
            if not isinstance(item, dict) or "question" not in item or "answer" not in item:
                raise DataError(f"{where}: expected an object with 'question', 'answer', 'context', 'data', "
                                "'metadata' (DSGym's dsbio format)")
            raw_paths = item.get("data") or []
            if not isinstance(raw_paths, list):
                raise DataError(f"{where}: 'data' must be a list of file paths, not {type(raw_paths).__name__}")
            paths = [str(self._find(root, str(rp), where)) for rp in raw_paths]
            meta = dict(item.get("metadata") or {})
            answer = item["answer"]
            metadata = {
                "question": item["question"], "context": item.get("context", ""),
                "answer_guideline": item.get("answer_guideline", ""), "domain": meta.get("domain", DEFAULT_DOMAIN),
                "data": list(raw_paths), "data_link": list(item.get("data_link") or []), "dsgym_metadata": meta,
                "answer_is_list": isinstance(answer, list), "source": SOURCE, "split": self.split.split,
            }
            sample = Sample(id=str(i), input="", target=None if answer is None else str(answer), metadata=metadata,
                            files=paths)
            sample.input = self.user_turn(metadata, paths, protocol)
            samples.append(apply_protocol(sample, self.options, self.split.key, ANSWER_RULES))
        return samples

    @staticmethod
    def _find(root: Path, raw: str, where: str) -> Path:
        rel = _strip_data_root(raw)
        for candidate in (root / rel, root / Path(rel).name):
            if candidate.is_file():
                return candidate
        raise DataError(f"{where}: data file {raw!r} not found under {root} (looked for {rel} and "
                        f"{Path(rel).name}); set 'data_dir:' to the folder holding DSGym's Bio data")

    @staticmethod
    def user_turn(m: dict[str, Any], paths: list[str], protocol: str) -> str:
        header = [f"QUESTION: {m['question']}", "", f"DOMAIN: {m['domain']}"]
        if m["answer_guideline"]:
            header.append(f"ANSWER GUIDELINES: {m['answer_guideline']}")
        parts = ["\n".join(header), files_block(paths, protocol) or "No dataset provided",
                 "Please analyze the data and provide your answer based on the specific question asked."]
        return "\n\n".join(parts)

    def extract_answer(self, output: str | None) -> str | None:
        return extract_final(output)

    def slices(self, sample: Sample) -> dict[str, Any]:
        out = {"domain": sample.metadata["domain"]}
        out.update(super().slices(sample))
        return out


_LITERAL_MAX = 100_000  # longer replies are not parsed as literals (literal_eval's cost grows with the text)


def python_list(text: str | None) -> list | None:
    """`text` as a Python list literal, else None (DSGym's `ast.literal_eval(text.strip())`)."""
    if not isinstance(text, str) or len(text) > _LITERAL_MAX:
        return None
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, list) else None


# DSGym's NumericMixin.extract_number: the first match of the first pattern that matches
_DSGYM_NUMBER = (re.compile(r"[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?"), re.compile(r"[-+]?\d+\.?\d*"))


def _first_number(text: str) -> float | None:
    for pattern in _DSGYM_NUMBER:
        m = pattern.search(text.strip())
        if m:
            try:
                return float(m.group())
            except ValueError:
                continue
    return None


def _parses_as_float(text: str) -> bool:
    try:
        float(text.strip())
    except ValueError:
        return False
    return True


def dsgym_exact_match(prediction: str | None, ground_truth: str, numeric_tolerance: float) -> tuple[bool, str]:
    """DSGym's ExactMatchMetric.evaluate, in its order: equal after strip + lowercase; else, both sides Python list
    literals: the same sets of lowercased items (decides, right or wrong); else, both sides parse with float():
    the relative error of their first numbers below the tolerance, strictly (against 0: |prediction| below it)."""
    pred = prediction or ""
    if pred.strip().lower() == ground_truth.strip().lower():
        return True, "equal (stripped, lowercased)"
    p, g = python_list(pred), python_list(ground_truth)
    if p is not None and g is not None:
        same = {str(x).lower() for x in p} == {str(x).lower() for x in g}
        return same, "list: the same items (as sets, lowercased)" if same else "list: different items"
    if _parses_as_float(pred) and _parses_as_float(ground_truth):
        pn, gn = _first_number(pred), _first_number(ground_truth)
        if pn is not None and gn is not None:
            error = abs(pn) if gn == 0 else abs(pn - gn) / abs(gn)
            ok = error < numeric_tolerance
            return ok, f"number: relative error {error:g} {'<' if ok else '>='} {numeric_tolerance:g}"
    return False, "different"


@register_metric("dsgym_exact_match")
class DSGymExactMatch(Metric):
    """DSGym's `exact_match` (dsgym/eval/metrics/exact_match.py), its semantics as they are: the default metric of
    `adapter: bio`, with dsbio's `numeric_tolerance: 0` (DSGym's own default, for other datasets: 0.03)."""

    name = "dsgym_exact_match"
    option_schema = DsgymExactMatchSettings  # typed and ranged (metrics/settings.py)
    requires_target = True
    inputs = frozenset()  # the target and the prediction only

    def __init__(self, **settings: Any):
        tol = settings.get("numeric_tolerance", 0.03)
        if isinstance(tol, bool) or not isinstance(tol, (int, float)):
            raise ConfigError(f"dsgym_exact_match: numeric_tolerance must be a number, not {tol!r}")
        super().__init__(**settings)
        self.numeric_tolerance = float(tol)

    def score(self, item: JudgeInput) -> Score:
        if item.target is None:
            return Score.unscored()
        ok, why = dsgym_exact_match(item.prediction, item.target, self.numeric_tolerance)
        return Score(value=float(ok), correct=ok, reason=why,
                     normalized_prediction=(item.prediction or "").strip().lower(),
                     normalized_target=item.target.strip().lower())
