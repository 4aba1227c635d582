"""An Inspect `.eval` log streamed into DuckDB tables, one sample member at a time (docs/interop.md "Large logs").

inspect_ai's `read_eval_log` builds every sample as pydantic objects before returning, so a log's memory grows
with its sample count. Here the zip's central directory is checked against the size cap
(evalpipe/core/file_caps.py), then each `samples/<id>_epoch_<n>.json` member is read through the bounded reader,
parsed with `json`, reduced to one row (and one row per scorer), and written in batches of `batch_rows` rows:
memory stays at one batch whatever the log's size. Scores are read with Inspect's own `value_to_float` (`C` 1, `I`
0, `P` 0.5, numbers as they are), as metric `inspect_scores` reads them.

`import_to_warehouse` (the `evalpipe import inspect` command) writes the same rows to the warehouse's tables of
those names, one Parquet partition per log; `import_log` into any DuckDB connection.

Tables (created when missing; rows of the same log file replaced):
- `inspect_samples`: log, id, epoch, input (text, or the chat messages' JSON), target (text, or a list's JSON),
  output (the completion), error, input_tokens, output_tokens, total_time;
- `inspect_scores`: log, id, epoch, scorer, value (as a float; NULL when not a number), answer.
"""
from __future__ import annotations

import json
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator

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


def _open_log(path: Path, cap: FileCap) -> tuple[zipfile.ZipFile, list[zipfile.ZipInfo]]:
    """The log's archive (sizes checked against the cap before anything is inflated) and its sample members."""
    check_size(path, cap)
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise DataError(f"{path}: not a readable Inspect eval log (not a zip archive: {exc}); a log cut short "
                        "(a copy or a run that stopped) has no directory to read: copy it again") from None
    try:
        check_zip(zf, cap, path)
    except BaseException:
        zf.close()
        raise
    return zf, [i for i in zf.infolist() if i.filename.startswith("samples/") and i.filename.endswith(".json")]


def _samples(path: Path, zf: zipfile.ZipFile, members: list[zipfile.ZipInfo], cap: FileCap) -> Iterator[dict]:
    for info in members:
        try:
            raw = read_member(zf, info, cap, path)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:  # a damaged member (CRC, cut short)
            raise DataError(f"{path}: member {info.filename} is damaged ({type(exc).__name__}: {exc})") from None
        try:
            yield json.loads(raw)
        except ValueError as exc:
            raise DataError(f"{path}: member {info.filename} is not JSON ({exc})") from None


def count_samples(path: str | Path, cap: FileCap = DEFAULT_CAP) -> int:
    """How many sample members the log holds (its central directory; nothing inflated)."""
    zf, members = _open_log(Path(path), cap)
    zf.close()
    return len(members)


def iter_samples(path: str | Path, cap: FileCap = DEFAULT_CAP) -> Iterator[dict[str, Any]]:
    """Each `samples/*.json` member of the log, parsed, one at a time (sizes checked before anything is inflated)."""
    path = Path(path)
    zf, members = _open_log(path, cap)
    with zf:
        yield from _samples(path, zf, members, cap)


def iter_batches(path: str | Path, cap: FileCap = DEFAULT_CAP, batch_rows: int = 10_000,
                 on_progress: Callable[[int, int], None] | None = None) -> Iterator[tuple[list[tuple], list[tuple]]]:
    """The log as (`inspect_samples` rows, `inspect_scores` rows) batches of `batch_rows` samples;
    `on_progress(done, total)` after each batch (total: the sample members in the log's directory)."""
    from inspect_ai.scorer import value_to_float

    to_float = value_to_float()
    path = Path(path)
    name = path.name
    zf, members = _open_log(path, cap)
    with zf:
        samples: list[tuple] = []
        scores: list[tuple] = []
        done = 0
        for sample in _samples(path, zf, members, cap):
            row, rows = sample_rows(name, sample, to_float)
            samples.append(row)
            scores.extend(rows)
            done += 1
            if len(samples) >= batch_rows:
                yield samples, scores
                samples, scores = [], []
                if on_progress:
                    on_progress(done, len(members))
        yield samples, scores
        if on_progress:
            on_progress(done, len(members))


def import_to_warehouse(path: str | Path, wh: Any, cap: FileCap = DEFAULT_CAP, batch_rows: int = 10_000,
                        on_progress: Callable[[int, int], None] | None = None) -> int:
    """The log's samples and scores into the warehouse `wh` (evalpipe/store/warehouse.py): one partition file per
    table for this log (`log` = its file name), written batch by batch through the warehouse's PartitionWriter
    (each batch redacted as every warehouse write is) and put into place only when the whole log was read, so a
    re-import replaces the log's rows and a log that fails half way leaves the previous import as it was.
    Returns the number of samples."""
    import pandas as pd

    name = Path(path).name
    part = {"log": name}
    n = 0
    with wh.writer("inspect_samples", part) as samples_w, wh.writer("inspect_scores", part) as scores_w:
        for samples, scores in iter_batches(path, cap, batch_rows, on_progress):
            if samples:
                samples_w.write(pd.DataFrame.from_records(samples, columns=SAMPLE_COLUMNS))
            if scores:
                scores_w.write(pd.DataFrame.from_records(scores, columns=SCORE_COLUMNS))
            n += len(samples)
    return n


def import_log(path: str | Path, con: Any, cap: FileCap = DEFAULT_CAP, batch_rows: int = 10_000) -> int:
    """The log's samples and scores into `con`'s (a DuckDB connection) tables `inspect_samples` and
    `inspect_scores`, in batches of `batch_rows`; the number of samples imported. Rows of the same log (its file
    name) are replaced, in one transaction. (`evalpipe import inspect` writes the warehouse instead:
    `import_to_warehouse`.)"""
    import pyarrow as pa

    name = Path(path).name
    con.execute("BEGIN")
    try:
        for table, ddl in _DDL.items():
            con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({ddl})")
            con.execute(f"DELETE FROM {table} WHERE log = ?", [name])
        n = 0
        for samples, scores in iter_batches(path, cap, batch_rows):
            for table, columns, rows in (("inspect_samples", SAMPLE_COLUMNS, samples),
                                         ("inspect_scores", SCORE_COLUMNS, scores)):
                if rows:
                    batch = pa.table({c: [r[i] for r in rows] for i, c in enumerate(columns)})
                    con.register("_inspect_batch", batch)
                    con.execute(f"INSERT INTO {table} SELECT {', '.join(columns)} FROM _inspect_batch")
                    con.unregister("_inspect_batch")
            n += len(samples)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return n
