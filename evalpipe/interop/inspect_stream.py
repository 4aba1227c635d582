"""An Inspect `.eval` log streamed into DuckDB tables, one sample member at a time (docs/interop.md "Large logs").

inspect_ai's `read_eval_log` builds every sample as pydantic objects before returning, so a log's memory grows
with its sample count. Here the zip's central directory is checked against the size cap
(evalpipe/core/file_caps.py), then each `samples/<id>_epoch_<n>.json` member is read through the bounded reader,
parsed with `json`, reduced to one row (and one row per scorer), and written in batches of `batch_rows` rows:
memory stays at one batch whatever the log's size. Scores are read with Inspect's own `value_to_float` (`C` 1, `I`
0, `P` 0.5, numbers as they are), as metric `inspect_scores` reads them.

Tables (created when missing; rows of the same log file replaced):
- `inspect_samples`: log, id, epoch, input (text, or the chat messages' JSON), target (text, or a list's JSON),
  output (the completion), error, input_tokens, output_tokens, total_time;
- `inspect_scores`: log, id, epoch, scorer, value (as a float; NULL when not a number), answer.
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any, Iterator

from evalpipe.core.errors import DataError
from evalpipe.core.file_caps import DEFAULT_CAP, FileCap, check_size, check_zip, read_member

SAMPLE_COLUMNS = ("log", "id", "epoch", "input", "target", "output", "error", "input_tokens", "output_tokens",
                  "total_time")
SCORE_COLUMNS = ("log", "id", "epoch", "scorer", "value", "answer")
_DDL = {
    "inspect_samples": "log VARCHAR, id VARCHAR, epoch INTEGER, input VARCHAR, target VARCHAR, output VARCHAR, "
                       "error VARCHAR, input_tokens BIGINT, output_tokens BIGINT, total_time DOUBLE",
    "inspect_scores": "log VARCHAR, id VARCHAR, epoch INTEGER, scorer VARCHAR, value DOUBLE, answer VARCHAR",
}


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _completion(output: dict[str, Any]) -> str | None:
    """ModelOutput.completion as Inspect computes it: the stored field, else the first choice's text."""
    if output.get("completion"):
        return output["completion"]
    choices = output.get("choices") or []
    if not choices:
        return None
    content = (choices[0].get("message") or {}).get("content")
    if isinstance(content, list):  # content parts: the text ones
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content


def sample_rows(log_name: str, sample: dict[str, Any], to_float: Any) -> tuple[tuple, list[tuple]]:
    """One sample member's JSON as (its `inspect_samples` row, its `inspect_scores` rows)."""
    sid, epoch = str(sample.get("id")), int(sample.get("epoch") or 1)
    output = sample.get("output") or {}
    usage = output.get("usage") or {}
    error = sample.get("error")
    row = (log_name, sid, epoch, _text(sample.get("input")), _text(sample.get("target")), _completion(output),
           error.get("message") if isinstance(error, dict) else _text(error), usage.get("input_tokens"),
           usage.get("output_tokens"), sample.get("total_time"))
    scores = []
    for scorer, score in (sample.get("scores") or {}).items():
        value = (score or {}).get("value")
        try:
            number = None if isinstance(value, (dict, list)) or value is None else float(to_float(value))
        except (TypeError, ValueError):
            number = None
        scores.append((log_name, sid, epoch, str(scorer), number, _text((score or {}).get("answer"))))
    return row, scores


def iter_samples(path: str | Path, cap: FileCap = DEFAULT_CAP) -> Iterator[dict[str, Any]]:
    """Each `samples/*.json` member of the log, parsed, one at a time (sizes checked before anything is inflated)."""
    path = Path(path)
    check_size(path, cap)
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise DataError(f"{path}: not a readable Inspect eval log (not a zip archive: {exc})") from None
    with zf:
        check_zip(zf, cap, path)
        for info in zf.infolist():
            if info.filename.startswith("samples/") and info.filename.endswith(".json"):
                try:
                    yield json.loads(read_member(zf, info, cap, path))
                except ValueError as exc:
                    raise DataError(f"{path}: member {info.filename} is not JSON ({exc})") from None


def import_log(path: str | Path, con: Any, cap: FileCap = DEFAULT_CAP, batch_rows: int = 10_000) -> int:
    """The log's samples and scores into `con`'s (a DuckDB connection) tables `inspect_samples` and
    `inspect_scores`, in batches of `batch_rows`; the number of samples imported. Rows of the same log (its file
    name) are replaced, in one transaction."""
    import pyarrow as pa
    from inspect_ai.scorer import value_to_float

    to_float = value_to_float()
    name = Path(path).name
    con.execute("BEGIN")
    try:
        for table, ddl in _DDL.items():
            con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({ddl})")
            con.execute(f"DELETE FROM {table} WHERE log = ?", [name])
        samples: list[tuple] = []
        scores: list[tuple] = []
        n = 0

        def flush() -> None:
            for table, columns, rows in (("inspect_samples", SAMPLE_COLUMNS, samples),
                                         ("inspect_scores", SCORE_COLUMNS, scores)):
                if rows:
                    batch = pa.table({c: [r[i] for r in rows] for i, c in enumerate(columns)})
                    con.register("_inspect_batch", batch)
                    con.execute(f"INSERT INTO {table} SELECT {', '.join(columns)} FROM _inspect_batch")
                    con.unregister("_inspect_batch")
                    rows.clear()

        for sample in iter_samples(path, cap):
            row, rows = sample_rows(name, sample, to_float)
            samples.append(row)
            scores.extend(rows)
            n += 1
            if len(samples) >= batch_rows:
                flush()
        flush()
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return n
