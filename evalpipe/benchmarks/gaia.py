"""GAIA (General AI Assistants): loading the gated Hub dataset or a local copy, prompting, answer extraction.

Layout of the dataset `gaia-benchmark/GAIA` on the Hugging Face Hub (and of a local copy):
`<year>/<split>/metadata.parquet` (older revisions: `metadata.jsonl`), with attachments beside it, named by
the `file_name` column. Answers of the `test` split are hidden as `?`: those samples are unscored.

Options (under the benchmark's `options:` or per split):
- `path`: a local folder (holding `2023/<split>/metadata.parquet`, `<split>/metadata.parquet` or
  `metadata.parquet`) or a metadata file; without it the split is downloaded from the Hub into the HF cache.
- `repo_id` (default gaia-benchmark/GAIA), `revision`, `year` (2023), `hf_split` (default: the split's name),
  `cache_dir`, `token_env` (the NAME of the variable holding the token; default HF_TOKEN), `endpoint`.
- `levels` ([1, 2]), `shuffle` + `seed`, `max_n` (per level), `limit` (total), applied in that order.
- `system_prompt`: replaces the answer-format instructions (null: none); `prompt_template` (benchmark level):
  a template for the user turn with variables question, file_path, file_name, level, task_id and every column.
"""
from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any, Iterable

from evalpipe.benchmarks import hub
from evalpipe.benchmarks.base import Adapter, files_version, register_adapter
from evalpipe.benchmarks.file import Table, as_text, is_missing, plain, read_table
from evalpipe.benchmarks.gaia_scorer import is_unscored
from evalpipe.benchmarks.templates import TemplateRenderError, load_template
from evalpipe.core.errors import ConfigError, DataError
from evalpipe.core.file_caps import OPTION, split_cap
from evalpipe.core.types import Sample

GAIA_REPO = "gaia-benchmark/GAIA"
PROMPT_COLUMNS = ("question", "Question")
TARGET_COLUMNS = ("final_answer", "Final answer", "answer")
ID_COLUMNS = ("task_id", "id")
LEVEL_COLUMNS = ("Level", "level")
METADATA_FILES = ("metadata.parquet", "metadata.jsonl")

# The answer-format rules of GAIA, in our own words: the scorer compares normalised strings, so the model
# has to give the bare answer in a fixed place.
GAIA_INSTRUCTIONS = (
    "You are a general AI assistant. Answer the question below. You may reason step by step first, but "
    "end your reply with one line of the form\n"
    "FINAL ANSWER: <your answer>\n"
    "The answer must be a number, or as few words as possible, or a comma separated list of numbers and/or "
    "words. For a number, write digits without thousands separators and without units such as $ or % "
    "unless the question asks for them. For words, do not use articles or abbreviations (e.g. write out "
    "city names), and write digits as numerals only if the question asks for a number. For a list, apply "
    "these rules to each element."
)

_FINAL_ANSWER = re.compile(r"final\s*answer\s*[:：]", re.IGNORECASE)
_WRAPPERS = "*_`\"' \t"


def extract_final_answer(output: str | None) -> str | None:
    """The text after the LAST `FINAL ANSWER:` (its first non-empty line, markdown emphasis stripped).

    Without the marker the whole reply (stripped) is the answer: agents often return only the answer.
    """
    if not isinstance(output, str):
        return None
    marks = list(_FINAL_ANSWER.finditer(output))
    if not marks:
        return output.strip()
    tail = output[marks[-1].end():]
    lines = [ln for ln in tail.splitlines() if ln.strip(_WRAPPERS)]
    answer = lines[0] if lines else ""
    # "**FINAL ANSWER:** 42" leaves "** 42"; `42` in backticks leaves the ticks
    answer = answer.strip().lstrip("*_").strip()
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in "`*_":
        answer = answer.strip(answer[0]).strip()
    return answer.rstrip("*_").strip()


def normalize_level(value: Any) -> str | None:
    """`1`, `1.0`, `"1"` and `" 1 "` are all level "1"; other text is kept as it is."""
    if is_missing(value):
        return None
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)) and float(value).is_integer():
        return str(int(value))
    text = str(value).strip()
    try:
        f = float(text)
    except ValueError:
        return text
    return str(int(f)) if f.is_integer() else text


def _first_present(table: Table, names: tuple[str, ...]) -> str | None:
    return next((n for n in names if n in table.columns), None)


def find_metadata(root: Path, split: str, year: str) -> Path | None:
    """The metadata file of `split` under `root`, trying the Hub layout first."""
    for folder in (root / year / split, root / split, root):
        for name in METADATA_FILES:
            if (folder / name).is_file():
                return folder / name
    return None


def samples_from_gaia_table(table: Table, metadata_file: Path, root: Path, template=None,
                            instructions: str | None = GAIA_INSTRUCTIONS) -> list[Sample]:
    """Rows of a GAIA metadata table as samples. Raises DataError for missing columns or attachments."""
    prompt_col = _first_present(table, PROMPT_COLUMNS)
    target_col = _first_present(table, TARGET_COLUMNS)
    if prompt_col is None or target_col is None:
        missing = [f"a question column ({' or '.join(PROMPT_COLUMNS)})"] if prompt_col is None else []
        missing += [f"an answer column ({' or '.join(TARGET_COLUMNS)})"] if target_col is None else []
        raise DataError(f"{table.path}: no {' and no '.join(missing)}; columns found: "
                        f"{', '.join(repr(c) for c in table.columns) or 'none'}")
    id_col = _first_present(table, ID_COLUMNS)
    samples: list[Sample] = []
    seen: dict[str, str] = {}
    for i, row in enumerate(table.rows):
        where = f"{table.path} {table.where(i)}"
        question = as_text(row.get(prompt_col), where, prompt_col)
        if not question or not question.strip():
            raise DataError(f"{where}: column {prompt_col!r} (the question) is empty")
        sid = (as_text(row.get(id_col), where, id_col) if id_col else None) or str(i)
        if sid in seen:
            raise DataError(f"{where}: duplicate id {sid!r} (first at {seen[sid]}); ids must be unique")
        seen[sid] = table.where(i)
        truth = as_text(row.get(target_col), where, target_col)
        target = None if is_unscored(truth) else truth
        metadata = {k: plain(v) for k, v in row.items() if k not in (prompt_col, target_col, id_col)}
        files = []
        file_name = as_text(row.get("file_name"), where, "file_name")
        if file_name and file_name.strip():
            attachment = _attachment(metadata_file, root, file_name.strip(), row.get("file_path"), where)
            metadata["file_path"] = str(attachment)
            files.append(str(attachment))
        user = _user_turn(question, files[0] if files else None, template, metadata, sid, where)
        samples.append(Sample(id=sid, input=user, target=target, metadata=metadata, files=files,
                              system=instructions or None))
    return samples


def _attachment(metadata_file: Path, root: Path, file_name: str, file_path: Any, where: str) -> Path:
    candidates = [metadata_file.parent / file_name]
    if isinstance(file_path, str) and file_path.strip():
        candidates.append(root / file_path.strip())
    for c in candidates:
        if c.is_file():
            return c.resolve()
    raise DataError(f"{where}: attachment {file_name!r} not found (looked in {metadata_file.parent}); copy the "
                    f"attachments next to {metadata_file.name}")


def _user_turn(question: str, file_path: str | None, template, metadata: dict[str, Any], sid: str, where: str) -> str:
    if template is not None:
        variables = {**metadata, "question": question, "file_path": file_path or "", "task_id": sid,
                     "file_name": metadata.get("file_name") or "",
                     "level": normalize_level(next((metadata[c] for c in LEVEL_COLUMNS if c in metadata), None)) or ""}
        try:
            return template.render(variables)
        except TemplateRenderError as exc:
            raise DataError(f"{where}: {exc}") from None
    if file_path:
        return f"{question}\n\nThe file attached to this question is at: {file_path}"
    return question


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, (list, tuple)) else [value]


def select(samples: list[Sample], levels: Any = None, shuffle: bool = False, seed: int = 0,
           max_n: int | None = None, limit: int | None = None) -> list[Sample]:
    """Level filter, then shuffle (seeded), then at most `max_n` per level, then at most `limit` in all."""
    out = list(samples)
    if levels is not None:
        wanted = {normalize_level(v) for v in _as_list(levels)}
        out = [s for s in out if _level(s) in wanted]
    if shuffle:
        random.Random(seed).shuffle(out)
    if max_n is not None:
        taken: dict[str | None, int] = {}
        kept = []
        for s in out:
            lvl = _level(s)
            if taken.get(lvl, 0) < int(max_n):
                taken[lvl] = taken.get(lvl, 0) + 1
                kept.append(s)
        out = kept
    if limit is not None:
        out = out[: int(limit)]
    return out


def _level(s: Sample) -> str | None:
    return normalize_level(next((s.metadata[c] for c in LEVEL_COLUMNS if c in s.metadata), None))


@register_adapter("gaia")
class GaiaAdapter(Adapter):
    """GAIA from the Hub (gated: needs HF_TOKEN and accepted terms) or from a local copy (`path:`)."""

    name = "gaia"
    default_metrics = ["gaia", "gaia_strict"]  # the official scorer, and its stricter variant beside it
    option_schema = {"path", "hf_split", "year", "repo_id", "revision", "cache_dir", "token_env", "endpoint",
                     "system_prompt", "levels", "shuffle", "seed", "max_n", OPTION}

    def _int_option(self, name: str) -> int | None:
        v = self.options.get(name)
        if v is None:
            return None
        try:
            n = int(v)
        except (TypeError, ValueError):
            n = -1
        if n < 0:
            raise ConfigError(f"{self.split.key}: '{name}' must be a non-negative integer, got {v!r}")
        return n

    def locate(self) -> tuple[Path, Path]:
        """(metadata file, dataset root), downloading the split from the Hub when no `path` is set."""
        split = str(self.options.get("hf_split") or self.split.split)
        year = str(self.options.get("year", "2023"))
        if self.options.get("path"):
            p = self.split.resolve(self.options["path"])
            if p.is_file():
                return p, p.parent
            if not p.exists():
                raise DataError(f"{self.split.key}: GAIA path {p} does not exist; fix 'path:' or remove it to "
                                f"download from the Hub")
            found = find_metadata(p, split, year)
            if found is None:
                raise DataError(f"{self.split.key}: no {' or '.join(METADATA_FILES)} for split {split!r} under {p} "
                                f"(looked in {year}/{split}/, {split}/ and the folder itself)")
            return found, p
        repo = str(self.options.get("repo_id") or GAIA_REPO)
        root = hub.download_snapshot(
            repo, repo_type="dataset", allow_patterns=[f"{year}/{split}/*"], revision=self.options.get("revision"),
            cache_dir=self.options.get("cache_dir"), token_env=self.options.get("token_env") or "HF_TOKEN",
            endpoint=self.options.get("endpoint"), what=f"split {year}/{split}",
            fix_local="set 'path:' under the gaia benchmark in the config to a local copy (e.g. data/gaia_sample)",
        )
        found = find_metadata(root, split, year)
        if found is None:
            raise DataError(f"{repo} has no {year}/{split}/metadata.parquet; check the split name ('hf_split:') "
                            f"and 'year:'")
        return found, root

    def load(self) -> Iterable[Sample]:
        max_n, limit = self._int_option("max_n"), self._int_option("limit")  # validate before any download
        metadata_file, root = self.locate()
        cap = split_cap(self.split.key, self.options)
        table = read_table(metadata_file, cap=cap)
        spec = self.split.prompt_template
        template = load_template(spec, self.split.base_dir, cap) if spec else None
        instructions = self.options.get("system_prompt", GAIA_INSTRUCTIONS)
        samples = samples_from_gaia_table(table, metadata_file, root, template, instructions)
        levels = self.options.get("levels")
        if levels is not None and not any(_level(s) is not None for s in samples):
            raise DataError(f"{table.path}: 'levels' is set but the file has no Level column")
        # `limit` is applied here, after the level filter and the shuffle; the pipeline's own cut to
        # `limit` afterwards then changes nothing.
        return select(samples, levels, bool(self.options.get("shuffle", False)), int(self.options.get("seed", 0)),
                      max_n, limit)

    def source_version(self) -> str | None:
        """A local copy (`path:`): its metadata file's size and mtime (attachments are read by the rollouts, not
        stored in the dataset). From the Hub: None, loaded (from the cache) every run."""
        if not self.options.get("path"):
            return None
        metadata_file, _ = self.locate()
        return files_version([metadata_file])

    def extract_answer(self, output: str | None) -> str | None:
        return extract_final_answer(output)

    def slices(self, sample: Sample) -> dict[str, str]:
        out = {}
        lvl = _level(sample)
        if lvl is not None:
            out["level"] = str(lvl)
        out.update(super().slices(sample))
        return out
