"""QRData: statistical and causal reasoning questions over data files, multiple-choice or numerical answers.

The original layout (GitHub xxxiaol/QRData, folder `benchmark/`): `QRData.json`, a JSON array of
`{"data_description", "question", "answer", "data_files": [...], "meta_data": {"reference", "keywords",
"question_type": "multiple_choice" | "numerical", "multiple_choices": [...]}}`, and the data files in `data.zip`
(read from the zip as it is, or from an unzipped `data/` folder). QRData is published on GitHub, not on the
Hugging Face Hub: a Hub copy in the same layout can be named with `repo_id:`.

Metrics: `qrdata` (the official `benchmark/eval.py` semantics, below) and `exact_match` with DSGym's
`numeric_tolerance: 0.03`. Slices: `question_type=statistical|causal` (causal = the keywords hold "Causality",
as the paper splits them), `answer_kind=multiple_choice|numerical`.

The `qrdata` scorer, as the official evaluation: both sides lowercased; numerical: the reference is a number (a
trailing `%` divides by 100), the prediction's FIRST number (`-?\\d+\\.?\\d*%?`, same % rule) must lie strictly
within 3% of it (so a reference of 0 can't be matched, as in the original); multiple choice: the prediction must
START with the reference (`"treatment group, because ..."` is right for `treatment group`).
"""
from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any, Iterable

from evalpipe.benchmarks import hub
from evalpipe.benchmarks.base import Adapter, read_json_array, register_adapter
from evalpipe.benchmarks.protocols import (COMMON_OPTIONS, apply_protocol, execute_reply_code, files_block, prepare_split,
                                          protocol_of)
from evalpipe.core.config import dagster_home
from evalpipe.core.errors import ConfigError, DataError
from evalpipe.core.file_caps import DEFAULT_CAP, FileCap, check_zip, file_sha256, split_cap
from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.metrics.settings import QrdataSettings
from evalpipe.core.types import Sample, Score

QRDATA_FILE = "QRData.json"
ERROR_SCALE = 0.03

ANSWER_RULES = (
    "You are a data analyst answering a statistical or causal question about the data described below. Work out "
    "the answer, then end your reply with one line of the form\nFINAL ANSWER: <answer>\nFor a numerical answer give "
    "only the number, rounded as asked; for a multiple-choice question give only the chosen option, exactly as "
    "written among the options."
)

_FINAL = re.compile(r"final\s*answer\s*[:：]", re.IGNORECASE)
_FIRST_NUMBER = re.compile(r"-?\d+\.?\d*%?")


def extract_final(output: str | None) -> str | None:
    """The text after the last `FINAL ANSWER:` (its first non-empty line), else the whole reply; outer whitespace
    trimmed and nothing else: markup such as `**yes**` is scored as given, as the official eval.py scores its `pred`
    (the `qrdata` metric's `strip_markup` setting is the deliberate exception)."""
    if not isinstance(output, str):
        return None
    marks = list(_FINAL.finditer(output))
    if not marks:
        return output.strip()
    lines = [ln.strip() for ln in output[marks[-1].end():].splitlines()]
    return next((ln for ln in lines if ln), "")


_MARKUP = "*`_ \t"


def strip_markup(pred: str) -> str:
    """Markdown emphasis and code marks (and the spaces inside them) around an answer: `**yes**` -> `yes`."""
    return pred.strip(_MARKUP)


def _as_float(text: str) -> float:
    return float(text[:-1]) / 100 if text.endswith("%") else float(text)


def qrdata_correct(pred: str, gold: str, kind: str) -> tuple[bool, str]:
    """The official QRData decision for one answer; (right, why)."""
    pred, gold = (pred or "").lower(), str(gold).lower()
    if kind == "numerical":
        g = _as_float(gold)
        m = _FIRST_NUMBER.search(pred)
        if not m:
            return False, "no number in the prediction"
        try:
            p = _as_float(m.group())
        except ValueError:
            return False, f"cannot read {m.group()!r} as a number"
        lo, hi = sorted((g * (1 - ERROR_SCALE), g * (1 + ERROR_SCALE)))
        ok = lo < p < hi
        return ok, f"{p:g} {'within' if ok else 'outside'} ({lo:g}, {hi:g})"
    ok = pred[: len(gold)] == gold
    return ok, "prediction starts with the reference" if ok else "prediction does not start with the reference"


@register_metric("qrdata")
class QRDataScore(Metric):
    """QRData's official scorer; the answer kind comes from the sample's `answer_kind` metadata. Setting
    `strip_markup` (false): remove `*`, `` ` ``, `_` and spaces around the prediction first (not in the official
    evaluation, which scores `**yes**` wrong for `yes`)."""

    name = "qrdata"
    known_settings = {"strip_markup"}
    option_schema = QrdataSettings  # typed (metrics/settings.py), checked before any model call

    def __init__(self, **settings: Any):
        unknown = set(settings) - self.known_settings
        if unknown:
            raise ConfigError(f"qrdata: unknown setting(s) {sorted(unknown)}; known: {sorted(self.known_settings)}")
        if not isinstance(settings.get("strip_markup", False), bool):
            raise ConfigError(f"qrdata: strip_markup must be true or false, not {settings['strip_markup']!r}")
        super().__init__(**settings)
        self.strip_markup = settings.get("strip_markup", False)

    def score(self, item: JudgeInput) -> Score:
        if item.target is None:
            return Score.unscored()
        kind = str(item.metadata.get("answer_kind") or "multiple_choice")
        pred = item.prediction or ""
        if self.strip_markup:  # not in the official evaluation: off by default
            pred = strip_markup(pred)
        try:
            ok, why = qrdata_correct(pred, item.target, kind)
        except ValueError:
            raise DataError(f"sample {item.sample_id!r}: QRData numerical reference {item.target!r} is not a number; "
                            f"fix its answer or its question_type") from None
        return Score(value=float(ok), correct=ok, reason=why, normalized_prediction=pred.lower(),
                     normalized_target=str(item.target).lower())


def find_questions(p: Path) -> Path | None:
    if p.is_file():
        return p
    for folder in (p, p / "benchmark"):
        if (folder / QRDATA_FILE).is_file():
            return folder / QRDATA_FILE
    return None


class DataFiles:
    """Finds a question's data files: in `data/` or beside QRData.json, else inside `data.zip` (extracted once into a
    cache folder keyed by the zip's content, so a user's copy is used as it is)."""

    def __init__(self, root: Path, cache: Path, cap: FileCap = DEFAULT_CAP):
        self.root, self.cache, self.cap = root, cache, cap
        self._zip_dir: Path | None = None

    def _unzipped(self) -> Path | None:
        if self._zip_dir is None:
            z = self.root / "data.zip"
            if not z.is_file():
                return None
            digest = file_sha256(z, self.cap)[:16]
            target = self.cache / digest
            if not (target / ".complete").is_file():
                target.mkdir(parents=True, exist_ok=True)
                try:
                    with zipfile.ZipFile(z) as zf:
                        check_zip(zf, self.cap)  # the members' sizes, before anything is inflated
                        zf.extractall(target)
                except zipfile.BadZipFile as exc:
                    raise DataError(f"{z}: not a readable zip file ({exc}); download benchmark/data.zip again") from None
                (target / ".complete").write_text("ok")
            self._zip_dir = target
        return self._zip_dir

    def find(self, name: str) -> Path | None:
        for c in (self.root / "data" / name, self.root / name):
            if c.is_file():
                return c.resolve()
        unz = self._unzipped()
        if unz is not None:
            hits = sorted(p for p in unz.rglob(Path(name).name) if p.is_file() and "__MACOSX" not in p.parts)
            if hits:
                return hits[0].resolve()
        return None


@register_adapter("qrdata")
class QRDataAdapter(Adapter):
    """QRData from its original files (`path:`), or a Hub copy in the same layout (`repo_id:`)."""

    name = "qrdata"
    option_schema = {*COMMON_OPTIONS, "question_types", "answer_kinds"}
    default_metrics = ["qrdata", {"name": "exact_match", "numeric_tolerance": ERROR_SCALE}]

    def __init__(self, split):
        super().__init__(split)
        prepare_split(split, self.options)

    def after_rollouts(self, rollouts, prompts):
        """single_turn: the reply's code run once in the sandbox and recorded (protocols.execute_reply_code)."""
        return execute_reply_code(rollouts, prompts, self.options, self.split.key)

    def locate(self) -> Path:
        if self.options.get("path"):
            p = self.split.resolve(self.options["path"])
            if not p.exists():
                raise DataError(f"{self.split.key}: QRData path {p} does not exist; fix 'path:' (a clone's benchmark/ "
                                f"folder or its {QRDATA_FILE})")
            found = find_questions(p)
            if found is None:
                raise DataError(f"{self.split.key}: no {QRDATA_FILE} under {p} (looked in the folder and benchmark/)")
            return found
        repo = self.options.get("repo_id")
        if not repo:
            raise ConfigError(f"{self.split.key}: QRData is published on GitHub (https://github.com/xxxiaol/QRData), not "
                              f"on the Hugging Face Hub: set 'path:' to a clone's benchmark/ folder (data.zip is read "
                              f"as it is), or 'repo_id:' to a Hub dataset in the same layout")
        root = hub.download_snapshot(
            str(repo), repo_type="dataset", allow_patterns=[QRDATA_FILE, f"*/{QRDATA_FILE}", "data.zip", "*/data.zip",
                                                            "data/*", "*/data/*"],
            revision=self.options.get("revision"), cache_dir=self.options.get("cache_dir"),
            token_env=self.options.get("token_env") or "HF_TOKEN", endpoint=self.options.get("endpoint"),
            what="the QRData files", fix_local="set 'path:' under the qrdata benchmark to a local copy (e.g. data/qrdata_sample/benchmark)")
        found = find_questions(root)
        if found is None:
            raise DataError(f"{repo} has no {QRDATA_FILE} (looked at its root and benchmark/)")
        return found

    def load(self) -> Iterable[Sample]:
        protocol = protocol_of(self.options, self.split.key)
        qfile = self.locate()
        cap = split_cap(self.split.key, self.options)
        items = read_json_array(qfile, "questions", cap)
        files = DataFiles(qfile.parent, dagster_home() / "cache" / "qrdata", cap)
        samples = []
        for i, item in enumerate(items):
            where = f"{qfile} question {i + 1}"
            if not isinstance(item, dict) or not item.get("question"):
                raise DataError(f"{where}: expected an object with 'question', 'answer', 'data_files', 'meta_data'")
            meta = item.get("meta_data") or {}
            kind = str(meta.get("question_type") or "").strip()
            if kind not in ("multiple_choice", "numerical"):
                raise DataError(f"{where}: meta_data.question_type must be 'multiple_choice' or 'numerical', not {kind!r}")
            answer = item.get("answer")
            target = None if answer is None or str(answer).strip() == "" else str(answer)
            if target is not None and kind == "numerical":
                try:
                    _as_float(target.lower())
                except ValueError:
                    raise DataError(f"{where}: numerical answer {target!r} is not a number") from None
            paths = []
            for name in item.get("data_files") or []:
                found = files.find(str(name))
                if found is None:
                    raise DataError(f"{where}: data file {name!r} not found in {qfile.parent}/data, beside {qfile.name} "
                                    f"or in data.zip; copy the benchmark's data next to {qfile.name}")
                paths.append(str(found))
            keywords = list(meta.get("keywords") or [])
            metadata = {"question": item["question"], "data_description": item.get("data_description") or "",
                        "data_files": list(item.get("data_files") or []), "answer_kind": kind,
                        "question_type": "causal" if "Causality" in keywords else "statistical",
                        "keywords": keywords, "reference": meta.get("reference"),
                        "multiple_choices": list(meta.get("multiple_choices") or [])}
            sample = Sample(id=str(item.get("id", i)), input="", target=target, metadata=metadata, files=paths,
                            choices=metadata["multiple_choices"] or None)
            sample.input = self.user_turn(metadata, paths, protocol)
            samples.append(apply_protocol(sample, self.options, self.split.key, ANSWER_RULES))
        for key in ("question_types", "answer_kinds"):
            wanted = self.options.get(key)
            if wanted is not None:
                field = key[:-1]
                samples = [s for s in samples if s.metadata[field] in set(wanted if isinstance(wanted, list) else [wanted])]
        if self.options.get("limit") is not None:
            samples = samples[: int(self.options["limit"])]
        return samples

    @staticmethod
    def user_turn(m: dict[str, Any], paths: list[str], protocol: str) -> str:
        parts = [m["data_description"], files_block(paths, protocol),
                 f"Question: {m['question']}"]
        if m["multiple_choices"]:
            parts.append("Options: " + "; ".join(m["multiple_choices"]))
        return "\n\n".join(p for p in parts if p)

    def extract_answer(self, output: str | None) -> str | None:
        return extract_final(output)

    def slices(self, sample: Sample) -> dict[str, Any]:
        out = {"question_type": sample.metadata["question_type"], "answer_kind": sample.metadata["answer_kind"]}
        out.update(super().slices(sample))
        return out
