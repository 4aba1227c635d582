"""The evaluation stages as plain functions over DataFrames. The Dagster assets only wire these together,
so every stage can be tested (and reused by the CLI) without Dagster."""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import itertools
import json
import operator
import pickle
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import quote

import pandas as pd

from evalpipe.benchmarks import Adapter, adapter_for
from evalpipe.benchmarks.routing import SourceRouter
from evalpipe.core.config import EvalConfig, ModelConfig, SplitConfig, dagster_home
from evalpipe.core.errors import DataError, RunFailed
from evalpipe.core.fingerprint import canonical_json, fingerprint
from evalpipe.core.redact import get_redactor
from evalpipe.pipeline.fingerprints import canonical_sample
from evalpipe.store.journal import Journal
from evalpipe.core.jsontext import dumps as _dump
from evalpipe.core.jsontext import encode_string, raw_decode
from evalpipe.metrics import JudgeInput, ScoreColumns, build_metric
# (`aggregate` from its module: once the submodule is imported, the package attribute is the module itself)
from evalpipe.metrics.aggregate import aggregate, reduce_epochs, with_directions
# the leaderboard, in a module of its own that reading it imports without the stages (issue 31); the names stay here
from evalpipe.pipeline.leaderboard import (build_leaderboard, failed_gates, intended_pairs_status,  # noqa: F401
                                           leaderboard_display, leaderboard_from)
from evalpipe.runners import Runner, RunSettings, run_requests
from evalpipe.core.types import RolloutRequest, Sample, Score


def _json(obj: Any) -> str | None:
    return None if obj is None else _dump(obj)


def _loads(s: Any, default: Any) -> Any:
    return json.loads(s) if isinstance(s, str) and s else default


def _loads_column(column: list[Any], empty: Callable[[], Any]) -> list[Any]:
    """`_loads(s, empty())` of each value of a column. A text that is exactly one JSON value (what `_json` writes) is
    read by the decoder's `raw_decode`, without `json.loads`' checks around it (the same value, in about half the
    time); any other text goes through `json.loads`, so a bad one raises as before."""
    out = []
    for s in column:
        if isinstance(s, str) and s:
            try:
                value, end = raw_decode(s)
            except json.JSONDecodeError:  # (leading whitespace, or not JSON)
                end = -1
            out.append(value if end == len(s) else json.loads(s))
        else:
            out.append(empty())
    return out


def _encode_each(encode: Callable[[Any], str], values: list[Any]) -> list[str]:
    """`[encode(v) for v in values]` from one call of `encode` (a JSON encoder: `_dump`, `canonical_json`):
    the values are encoded as one list of `{"\\u0000": v}` wrappers and the text is cut where one wrapper ends and
    the next begins. JSON encodes a list item by item, so the pieces are the values' own texts byte for byte; cuts
    never overlap (a cut holds one "}", its first character) and one precedes every value but the first, so there
    is exactly one piece per value unless a value's text holds a cut too: then each value is encoded alone.
    Why: the encoder's set-up per call costs more than encoding a small value (a sample's metadata, messages)."""
    if len(values) < 2:
        return [encode(v) for v in values]
    probe = encode([{_WRAPPER: True}, {_WRAPPER: True}])  # '[{"\\u0000": true}, {"\\u0000": true}]'
    head = probe[1:probe.index("true")]  # '{"\\u0000": '
    cut = probe[probe.index("true") + 4:probe.rindex(head)] + head  # '}, {"\\u0000": '
    out: list[str] = []
    for start in range(0, len(values), _WRAPPED):  # (a few wrappers at a time: they die young, the GC never walks them)
        chunk = values[start:start + _WRAPPED]
        pieces = encode([{_WRAPPER: v} for v in chunk])[1 + len(head):-2].split(cut)
        out += pieces if len(pieces) == len(chunk) else [encode(v) for v in chunk]
    return out


_WRAPPER = "\x00"  # the key `_encode_each` wraps values in (escaped in JSON, so rare inside a value's text)
_WRAPPED = 500  # values per encoder call


def _json_each(values: list[Any]) -> list[str | None]:
    """`_json` of each value (None stays None), the values encoded together (`_encode_each`)."""
    texts = iter(_encode_each(_dump, [v for v in values if v is not None]))
    return [None if v is None else next(texts) for v in values]


# ---- dataset ----------------------------------------------------------------------------------------------------
DATASET_COLUMNS = ["benchmark_split", "sample_id", "sample_index", "input", "target", "choices", "system", "files",
                   "metadata", "slices", "messages", "tools"]


def build_dataset(split: SplitConfig) -> pd.DataFrame:
    """The whole split as one DataFrame (small splits, tests); the `dataset` asset streams `dataset_batches`."""
    attrs: dict[str, Any] = {}
    frames = list(dataset_batches(split, None, attrs))
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    df.attrs.update(attrs)
    return df


def dataset_batches(split: SplitConfig, batch_rows: int | None, attrs: dict[str, Any]) -> Iterator[pd.DataFrame]:
    """The split's samples as DataFrames of at most `batch_rows` rows (None: one frame), in load order; at least
    one (maybe empty) frame. When the generator is exhausted, `attrs` holds `dataset_sha256`, `header`, `shard` and
    `fingerprint_mismatches`: the fingerprint covers every loaded sample (before limit and sharding), so a header
    mismatch that must fail the run raises only after the last batch (the partition writer then discards them)."""
    from evalpipe.pipeline import fingerprints
    from evalpipe.pipeline import shards
    from evalpipe.core.errors import ConfigError

    adapter = adapter_for(split)
    limit = split.options.get("limit")
    if limit is not None and int(limit) < 0:  # checked with the config too; a negative slice would drop samples
        raise ConfigError(f"{split.key}: limit must be >= 0, got {limit}")
    limit = int(limit) if limit is not None else None
    wanted = split.options.get("sample_ids")  # [epochs] `sample_ids:` in the config: the split is these samples
    wanted = {str(i) for i in wanted} if wanted is not None else None
    shard = shards.shard_spec(split.options)
    n = max(1, int(batch_rows)) if batch_rows else None
    sha = DatasetSha()
    seen: set[int] = set()  # hashes of the ids so far: 1M ids in ~70 MB instead of the strings' ~130 MB
    # the batch as two lists, not an (index, sample) tuple per sample: fewer objects for the GC to walk (docs/scale.md)
    indices: list[int] = []
    batch: list[Sample] = []
    yielded = False
    wanted_seen: set[str] = set()
    for i, s in enumerate(adapter.load()):  # the `file` adapter's load() reads its file as it is iterated
        sha.add(s)
        if limit is not None and i >= limit:
            continue  # [reproducibility] still fingerprinted: the header pins the file's content, not the slice
        if wanted is not None and str(s.id) not in wanted:
            continue
        if wanted is not None:
            wanted_seen.add(str(s.id))
        if shard is not None and shards.shard_of(s.id, shard[0]) != shard[1]:
            continue
        h = hash(s.id)
        if h in seen:  # (a 64-bit hash: a false alarm needs ~4e9 samples)
            raise DataError(f"{split.key}: duplicate sample id {s.id!r}; ids must be unique within a split")
        seen.add(h)
        indices.append(i)  # sample_index: the position in the split, the same in every shard
        batch.append(s)
        if n is not None and len(batch) >= n:
            yield _dataset_frame(split, adapter, indices, batch)
            yielded, indices, batch = True, [], []
    if wanted is not None and len(wanted_seen) < len(wanted):
        missing = sorted(wanted - wanted_seen)
        raise ConfigError(f"{split.key}: sample_ids names {len(missing)} id(s) the split does not have, e.g. "
                          f"{missing[0]!r}; fix `sample_ids:` in the config (ids as in the split's data)")
    if batch or not yielded:
        yield _dataset_frame(split, adapter, indices, batch)
    header = adapter.header() if hasattr(adapter, "header") else None
    dataset_sha = sha.hexdigest()
    mismatches = fingerprints.check_header(split.key, header, {"dataset_sha256": dataset_sha}, ["dataset_sha256"],
                                           split.options)
    attrs.update({"dataset_sha256": dataset_sha, "header": header, "shard": shard,
                  "fingerprint_mismatches": mismatches})


def _dataset_frame(split: SplitConfig, adapter: Any, indices: list[int], samples: list[Sample]) -> pd.DataFrame:
    """One batch as `datasets` rows, column by column (the same values and dtypes as a frame of row dicts, without a
    dict per sample; each JSON column encoded in one call, `_json_each`)."""
    if not samples:
        return pd.DataFrame([], columns=DATASET_COLUMNS)
    return pd.DataFrame({
        "benchmark_split": [split.key] * len(samples), "sample_id": [s.id for s in samples],
        "sample_index": indices, "input": [s.input for s in samples],
        "target": [s.target for s in samples], "choices": _json_each([s.choices for s in samples]),
        "system": [s.system for s in samples], "files": _json_each([s.files for s in samples]),
        "metadata": _json_each([s.metadata for s in samples]),
        "slices": _json_each([adapter.slices(s) for s in samples]),
        "messages": _json_each([s.messages for s in samples]), "tools": _json_each([s.tools for s in samples]),
    }, columns=DATASET_COLUMNS)


class DatasetSha:
    """`fingerprints.dataset_sha256` computed while the samples stream by, with the same value: the canonical JSON
    of the `canonical_sample` records sorted by id. Records are encoded `BLOCK` at a time (`_encode_each`), their
    texts kept up to `spill_rows`, then sorted runs go to temp files and are merged (heapq.merge, stable like
    `sorted`) when the digest is asked for."""

    BLOCK = 500  # records encoded at a time (`_encode_each`); (id, text) pairs per pickled block of a sort run

    def __init__(self, spill_rows: int = 50_000):
        self.spill_rows = spill_rows
        self._records: list[dict[str, Any]] = []  # not encoded yet
        self._ids: list[str] = []  # and the encoded records' texts, side by side (no tuple per record to walk)
        self._texts: list[str] = []
        self._runs: list[Any] = []

    def add(self, sample: Sample) -> None:
        self._records.append(canonical_sample(sample))
        if len(self._records) >= self.BLOCK:
            self._encode()

    def _encode(self) -> None:
        records, self._records = self._records, []
        self._ids += [str(r["id"]) for r in records]
        self._texts += _encode_each(canonical_json, records)
        if len(self._ids) >= self.spill_rows:
            self._spill()

    def _sorted(self) -> Iterator[tuple[str, str]]:
        """The (id, text) pairs kept, by id (stable)."""
        ids, texts = self._ids, self._texts
        self._ids, self._texts = [], []
        return ((ids[i], texts[i]) for i in sorted(range(len(ids)), key=ids.__getitem__))

    def _spill(self) -> None:
        import tempfile

        pairs = self._sorted()
        fh = tempfile.TemporaryFile()
        while block := list(itertools.islice(pairs, self.BLOCK)):  # (pickled strings: no escaping, no parsing back)
            pickle.dump(block, fh, protocol=pickle.HIGHEST_PROTOCOL)
        self._runs.append(fh)

    @staticmethod
    def _run(fh: Any) -> Iterator[tuple[str, str]]:
        fh.seek(0)
        while True:
            try:
                block = pickle.load(fh)
            except EOFError:
                return
            yield from block

    def hexdigest(self) -> str:
        import heapq

        self._encode()
        h = hashlib.sha256(b"[")
        if self._runs:
            if self._ids:
                self._spill()
            records: Iterator[tuple[str, str]] = heapq.merge(*(self._run(fh) for fh in self._runs), key=_ID)
        else:
            records = self._sorted()
        sep = ""
        while True:  # the texts joined by "," a block at a time: the same bytes as one by one
            texts = [text for _, text in itertools.islice(records, self.BLOCK)]
            if not texts:
                break
            h.update((sep + ",".join(texts)).encode("utf-8"))
            sep = ","
        h.update(b"]")
        for fh in self._runs:
            fh.close()
        self._runs = []
        return h.hexdigest()


_ID = operator.itemgetter(0)  # an (id, text) pair's sort key


def samples_from_frame(df: pd.DataFrame) -> list[Sample]:
    """The samples of a `datasets` frame, read column by column (`_loads_column`)."""
    n = len(df)

    def column(name: str) -> list[Any]:  # `messages` and `tools` may be missing (older partitions)
        return df[name].tolist() if name in df.columns else [None] * n

    def none() -> None:
        return None

    return [Sample(id=sid, input=text, target=target if isinstance(target, str) else None, metadata=metadata,
                   choices=choices, system=system if isinstance(system, str) else None, files=files,
                   messages=messages, tools=tools)
            for sid, text, target, metadata, choices, system, files, messages, tools in zip(
                df["sample_id"].tolist(), df["input"].tolist(), df["target"].tolist(),
                _loads_column(df["metadata"].tolist(), dict), _loads_column(df["choices"].tolist(), none),
                df["system"].tolist(), _loads_column(df["files"].tolist(), list),
                _loads_column(column("messages"), none), _loads_column(column("tools"), none))]


# ---- prompts ----------------------------------------------------------------------------------------------------
def limit_rows(dataset: pd.DataFrame, model_key: str) -> pd.DataFrame:
    """The rows of a `datasets` frame (or batch) that a `<model>@limit<N>` key evaluates: sample_index < N (the
    position in the whole split, so a shard keeps its part of the first N, as before sharding); that a
    `<model>@ids-<h>` key evaluates: the recorded ids (`selection_of`). Any other key: all."""
    from evalpipe.core.run_marks import limit_of, selection_of

    n, ids = limit_of(model_key), selection_of(model_key)
    if (n is None and ids is None) or not len(dataset):
        return dataset
    keep = dataset["sample_index"] < n if n is not None else dataset["sample_id"].astype(str).isin(set(ids))
    return dataset if keep.all() else dataset[keep].reset_index(drop=True)


def split_epochs(split: SplitConfig) -> int:
    """How many times each sample is evaluated (the split's `epochs`, default 1)."""
    return int(split.options.get("epochs") or 1)


def with_epochs(prompts: pd.DataFrame, epochs: int) -> pd.DataFrame:
    """Each prompt row `epochs` times, sample-major; epoch e > 1 of sample `<id>` is the row `<id>#epoch<e>`
    (core/run_marks.py `epoch_id`): its own rollout fingerprint (which covers the row id), the same prompt
    fingerprint, and epoch 1 is the row as without epochs (its journal entry is reused)."""
    if epochs <= 1 or not len(prompts):
        return prompts
    from evalpipe.core.run_marks import epoch_id

    out = prompts.loc[prompts.index.repeat(epochs)].reset_index(drop=True)
    out["sample_id"] = [epoch_id(sid, e) for sid in prompts["sample_id"].tolist() for e in range(1, epochs + 1)]
    return out


def render_messages(messages: list[dict[str, Any]]) -> str:
    return "\n\n".join(f"[{m.get('role', 'user')}]\n{m.get('content', '')}" for m in messages)


def build_prompts(split: SplitConfig, model_key: str, dataset: pd.DataFrame, wrapper: Any = None) -> pd.DataFrame:
    """`wrapper`: a `PromptWrapper` (evalpipe/pipeline/prompt_wrappers.py) shaping the system and user turns, or None.
    A `<model>@limit<N>` key (evalpipe/core/run_marks.py) gets the samples whose `sample_index` is below N: the first N
    of the split, read from the key so that every materialization of it takes the same ones (the `dataset`
    partition holds the whole split for every key). Built column by column (the same values and dtypes as a frame
    of row dicts), each JSON column and the fingerprints' canonical JSON encoded in one call (`_encode_each`)."""
    dataset = limit_rows(dataset, model_key)
    adapter = adapter_for(split)
    config_tools = split_tool_schemas(split)  # [tools] schemas the benchmark config offers every sample
    samples = samples_from_frame(dataset)
    if not samples:
        return pd.DataFrame([])
    router = SourceRouter.of(split.key, split.options)
    if router is not None:  # [routing] a sample no metric would judge fails here, before any model call
        router.check((s.id for s in samples), (s.metadata for s in samples))
    wrapper_id = {"wrapper": wrapper.sha256} if wrapper is not None else {}
    pii = get_redactor().pii  # [pii] the model is sent the prompts as stored, PII masked: part of what it is asked
    if pii is not None:
        wrapper_id = wrapper_id | {"pii": [list(pii.entities), pii.locale]}
    all_messages, all_tools, identities = [], [], []
    for s in samples:
        tools = merge_tools(s.tools, config_tools)
        if wrapper is not None and not s.messages:  # [reproducibility] native chat messages are sent unwrapped
            messages = wrapper.render(user=s.input, system=s.system, tools=getattr(s, "tools", None))
        else:
            messages = adapter.build_messages(s)
        all_messages.append(messages)
        all_tools.append(tools)
        identities.append({"messages": messages, "files": s.files} | wrapper_id
                          | ({"tools": tools} if tools is not None else {}))
    n = len(samples)
    return pd.DataFrame({
        "benchmark_split": [split.key] * n, "model": [model_key] * n, "sample_id": [s.id for s in samples],
        "sample_index": dataset["sample_index"].tolist(), "messages": _json_each(all_messages),
        "prompt_text": [render_messages(m) for m in all_messages], "target": [s.target for s in samples],
        "files": dataset["files"].tolist(), "metadata": dataset["metadata"].tolist(),
        "slices": dataset["slices"].tolist(),
        # fingerprint(identity) of each: the first 32 hex digits of the SHA-256 of its canonical JSON
        "prompt_fingerprint": [hashlib.sha256(t.encode("utf-8")).hexdigest()[:32]
                               for t in _encode_each(canonical_json, identities)],
        "tools": _json_each(all_tools),
    }).pipe(with_epochs, split_epochs(split))


# ---- rollouts ---------------------------------------------------------------------------------------------------
def journal_path(table: str, split_key: str, model_key: str) -> Path:
    return dagster_home() / "journal" / table / quote(split_key, safe="") / f"{quote(model_key, safe='')}.sqlite"


def rollout_requests(runner: Runner, prompts: pd.DataFrame, tools_env: Any = None) -> list[RolloutRequest]:
    ident = runner.identity()
    # [tools] a sample with tools is a conversation: its fingerprint also covers the fixtures' SHA-256, the tool
    # mode, live tools and the loop limits (one-shot samples keep their fingerprints)
    tools_id = fingerprint(tools_env.identity()) if tools_env is not None else None
    parsed: dict[str, Any] = {}  # one list object per distinct schema JSON (the loop caches per object)
    out = []
    # `fingerprint(fp)` below, with the runner's canonical JSON made once instead of once per sample
    ident_json, tools_json = canonical_json(ident), canonical_json(tools_id)
    n = len(prompts)
    # column by column (lists, not a namedtuple per row; the stored JSON read by `_loads_column`)
    raw_tools_col = prompts["tools"].tolist() if "tools" in prompts.columns else [None] * n
    messages_col = _loads_column(prompts["messages"].tolist(), lambda: None)
    if None in messages_col:
        sid = prompts["sample_id"].iloc[messages_col.index(None)]
        raise DataError(f"prompts row {sid!r} has no messages; re-materialize the partition's prompts")
    for sample_id, prompt_fp, messages, files, metadata, target, raw_tools in zip(
            prompts["sample_id"].tolist(), prompts["prompt_fingerprint"].tolist(), messages_col,
            _loads_column(prompts["files"].tolist(), list), _loads_column(prompts["metadata"].tolist(), dict),
            prompts["target"].tolist(), raw_tools_col):
        tools = None
        if isinstance(raw_tools, str) and raw_tools:
            tools = parsed.get(raw_tools)
            if tools is None:
                tools = parsed[raw_tools] = json.loads(raw_tools)
        # canonical_json({"runner": ident, "prompt": ..., "sample": ..., ["tools": tools_id]}): keys in sorted order
        # a sample's own generation settings (metadata `request_params`, e.g. an lm_eval task's generation_kwargs)
        # ride on the request and in its fingerprint; without them the fingerprint is what it always was
        params = metadata.get("request_params") if isinstance(metadata, dict) else None
        head = f'"params":{canonical_json(params)},' if params else ""
        fp = (f'{{{head}"prompt":{_canonical_value(prompt_fp)},"runner":{ident_json},"sample":{_canonical_value(sample_id)}'
              + (f',"tools":{tools_json}}}' if tools is not None else "}"))
        out.append(RolloutRequest(
            sample_id=sample_id, messages=messages, fingerprint=hashlib.sha256(fp.encode("utf-8")).hexdigest()[:32],
            files=files, metadata=metadata,
            target=target if isinstance(target, str) else None, tools=tools, params=params or None))
    return out


def _canonical_value(value: Any) -> str:
    """canonical_json(value), byte for byte: for a string that is the JSON string the encoder itself writes (json's
    C `encode_basestring`, what `json.dumps(s, ensure_ascii=False)` returns) without building an encoder per call."""
    return encode_string(value) if isinstance(value, str) else canonical_json(value)


# ---- tools (docs/tools.md) ------------------------------------------------------------------------------------------
TRACE_COLUMNS = ("turns", "tool_calls", "invalid_args", "fixture_misses", "stop_reason", "tool_trace")
TOOL_CALL_COLUMNS = ("turn", "call_index", "name", "arguments", "arguments_valid", "normalized_key", "result",
                     "fixture_hit", "error", "latency_s")


def split_tool_schemas(split: SplitConfig) -> list[dict[str, Any]] | None:
    """The tool schemas a split's `tools:` config offers every sample (None without a `tools:` config)."""
    from evalpipe.tools import ToolEnv

    env = ToolEnv.for_split(split)
    return env.schemas() if env is not None else None


def merge_tools(sample_tools: list[dict[str, Any]] | None,
                config_tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """The config's schemas, then the sample's own (a name the sample defines wins); None when none is offered."""
    if sample_tools is None and config_tools is None:
        return None
    from evalpipe.tools.schema import schema_name

    out = {schema_name(t): t for t in (config_tools or [])}
    out.update({schema_name(t): t for t in (sample_tools or [])})
    return list(out.values()) or None  # nothing offered: a one-shot request


def tools_env_for(split: SplitConfig, prompts: pd.DataFrame, mode: str | None = None,
                  configured_sandbox: str | None = None) -> Any:
    """The split's `ToolEnv`; a default one (no fixtures) when only the dataset offers tools; else None.
    `configured_sandbox`: the project's `sandbox:`."""
    from evalpipe.tools import ToolEnv

    own = getattr(adapter_for(split), "tool_env", None)  # [tau2] an adapter with its own tool layer
    if own is not None:
        return own(mode=mode)
    env = ToolEnv.for_split(split, mode=mode, configured_sandbox=configured_sandbox)
    if env is None and "tools" in prompts.columns and prompts["tools"].notna().any():
        env = ToolEnv({}, split.options, resolve=split.resolve, mode=mode, where=split.key,
                      configured_sandbox=configured_sandbox)
    return env


def tool_calls_frame(rollouts: pd.DataFrame) -> pd.DataFrame:
    """The `tool_calls` table rows of a rollouts frame (from each sample's `tool_trace`)."""
    cols = ["benchmark_split", "model", "sample_id", *TOOL_CALL_COLUMNS]
    rows = []
    if "tool_trace" in rollouts.columns and rollouts["tool_trace"].notna().any():
        traced = rollouts[rollouts["tool_trace"].notna()]  # (one-shot samples have no trace: not visited)
        for r in traced[["benchmark_split", "model", "sample_id", "tool_trace"]].itertuples(index=False):
            for rec in _loads(r.tool_trace, []):
                rows.append({"benchmark_split": r.benchmark_split, "model": r.model, "sample_id": r.sample_id,
                             **{c: rec.get(c) for c in TOOL_CALL_COLUMNS}})
    return pd.DataFrame(rows, columns=cols)


def run_rollouts(split: SplitConfig, model: ModelConfig, prompts: pd.DataFrame, runner: Runner,
                 settings: RunSettings, progress: Callable[[int, int], None] | None = None,
                 journal_file: Path | None = None, tools_mode: str | None = None) -> pd.DataFrame:
    """`tools_mode` overrides the split's `tools.mode` (replay | live) for this run. One frame of prompts; the
    `rollouts` asset streams batches through one `RolloutSession` (the same code)."""
    with RolloutSession(split, model, runner, settings, progress, journal_file, tools_mode, total=len(prompts)) as rs:
        return rs.run(prompts)


class RolloutSession:
    """Rollouts of one partition, batch by batch: one event loop, one started runner, one open journal and one
    progress count across every batch, so a batch is only the unit of memory, never of setup. Within a batch
    requests run concurrently as before (evalpipe/runners/driver.py); `total` is the partition's sample count for
    progress. The journal commits each finished sample, so a run killed mid-partition resumes from it."""

    def __init__(self, split: SplitConfig, model: ModelConfig, runner: Runner, settings: RunSettings,
                 progress: Callable[..., None] | None = None, journal_file: Path | None = None,
                 tools_mode: str | None = None, total: int | None = None,
                 worker_init: Callable[[], Any] | None = None, configured_sandbox: str | None = None):
        # worker_init: run first in each rollout_shards worker process (the caller's plugin loading and
        # secrets); configured_sandbox: the project's `sandbox:`, for tool sessions
        self.split, self.model, self.runner, self.settings = split, model, runner, settings
        self.configured_sandbox = configured_sandbox
        self.worker_init = worker_init
        self.adapter = adapter_for(split)
        self.tools_mode, self.total = tools_mode, total
        self.journal_file = journal_file or journal_path("rollouts", split.key, model.key)
        self.n_shards = int(model.options.get("rollout_shards") or split.options.get("rollout_shards") or 1)
        self.done = self.failed = 0
        from evalpipe.runners.driver import _with_errors

        self._progress = _with_errors(progress)  # (inspects the callback once, not per sample)
        self._tools_env: Any = None
        self._tools_checked = False
        self._loop: asyncio.Runner | None = None
        self._journal: Journal | None = None
        self._started = False  # runner.start() ran (the driver calls it for the first batch with work)
        self._used = False  # a batch ran in this process: the runner is closed on exit
        self.tool_registry_sha256: str | None = None

    def __enter__(self) -> "RolloutSession":
        self._loop = asyncio.Runner()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self._used and self._loop is not None:
                self._loop.run(self.runner.aclose())
                close = getattr(self._tools_env, "aclose", None)  # [tau2] the tool layer's own runners (its user)
                if close is not None:
                    self._loop.run(close())
        finally:
            if self._journal is not None:
                self._journal.close()
            if self._loop is not None:
                self._loop.close()

    def _env(self, prompts: pd.DataFrame) -> Any:
        if not self._tools_checked or (self._tools_env is None and "tools" in prompts.columns
                                       and prompts["tools"].notna().any()):
            self._tools_env = tools_env_for(self.split, prompts, self.tools_mode, self.configured_sandbox)
            self._tools_checked = True
        return self._tools_env

    def _report(self, done: int, total: int, errors: int = 0) -> None:
        if self._progress is not None:
            self._progress(self.done + done, self.total or total, self.failed + errors)

    def run(self, prompts: pd.DataFrame) -> pd.DataFrame:
        """The rollouts of one batch of prompts (one row per prompt, in prompt order)."""
        assert self._loop is not None, "use RolloutSession as a context manager"
        tools_env = self._env(prompts)
        check = getattr(self.adapter, "check_runner", None)  # e.g. lm_eval: a log-likelihood task needs a runner
        if check is not None:                                # that computes them; refused before any model call
            check(self.runner)
        requests = rollout_requests(self.runner, prompts, tools_env)
        progress = self._report if self._progress is not None else None
        # [tools] conversations need the split's tool layer, which lives in this process: they are not sharded
        if self.n_shards > 1 and len(requests) > 1 and tools_env is None:  # [reproducibility] N worker processes by stable-hash shard, merged
            from evalpipe.pipeline.shards import run_sharded

            rows = run_sharded(self.model, requests, self.settings, self.n_shards, self.journal_file, progress,
                               self.worker_init)
        else:
            if self._journal is None:
                self._journal = Journal(self.journal_file)
            self._used = True
            rows = self._loop.run(run_requests(self.runner, requests, self._journal, self.settings, progress,
                                               close=False, tools=tools_env, start=not self._started))
            self._started = self._started or any(not r.get("cached") for r in rows)
        from evalpipe.runners.driver import ROW_FIELDS

        df = pd.DataFrame(rows) if rows else pd.DataFrame(columns=[*ROW_FIELDS, "cached"])  # 0 samples: 0 rows
        self.done += len(df)
        self.failed += int((df["status"] != "ok").sum())
        for c in TRACE_COLUMNS:  # [tools] conversation columns (null for one-shot samples)
            if c not in df.columns:
                df[c] = None
        df["tool_trace"] = [_json(t) if isinstance(t, list) else t for t in df["tool_trace"]]
        if tools_env is not None:
            self.tool_registry_sha256 = df.attrs["tool_registry_sha256"] = tools_env.tool_registry_sha256()
        adapter = self.adapter
        df["prediction"] = [adapter.extract_answer(t) if s == "ok" else None
                            for t, s in zip(df.get("raw_output", [None] * len(df)), df["status"])]
        after = getattr(adapter, "after_rollouts", None)  # e.g. single_turn code run once (benchmarks/protocols.py)
        if after is not None:
            df = after(df, prompts)
        df["benchmark_split"], df["model"] = self.split.key, self.model.key
        return df


# ---- judgements -------------------------------------------------------------------------------------------------
# the rollouts columns `judge` reads (the judgements asset reads only these, side by side with the prompts)
JUDGE_ROLLOUT_COLUMNS = ["sample_id", "status", "error", "prediction", "raw_output", "trajectory", "tool_trace",
                         "stop_reason"]
# the prompts columns it reads (the asset reads only these: the messages, files and fingerprints stay on disk)
JUDGE_PROMPT_COLUMNS = ["sample_id", "model", "prompt_text", "target", "metadata", "slices", "tools"]


class VerdictTally:
    """Per metric, how many verdicts a partition got and whether any measured something. A metric every one of
    whose verdicts is an `error` (a judge that never answered, a sandbox that never ran) measured nothing: its
    value would read 0.0 over n samples, so the partition fails instead, naming the first error (issue 20).
    A `parse_error` (the model's answer could not be read) is the model's and counts as wrong, as before."""

    def __init__(self) -> None:
        self.rows: dict[str, int] = {}
        self.measured: set[str] = set()
        self.first_error: dict[str, str] = {}

    def add(self, df: pd.DataFrame) -> None:
        if not len(df):
            return
        for metric, g in df.groupby("metric", sort=False):
            self.rows[metric] = self.rows.get(metric, 0) + len(g)
            errors = g["status"] == "error"
            if not errors.all():
                self.measured.add(metric)
            elif metric not in self.first_error:
                bad = g.iloc[0]
                reason = " ".join(str(bad.get("reason") or "error").split())
                self.first_error[metric] = f"sample {bad['sample_id']}: {reason[:500]}"

    def check(self, mask: Callable[[str], str] = str) -> None:
        """Raise RunFailed for the first metric that measured nothing (`mask`: the redactor for the error text)."""
        failed = [m for m in self.rows if m not in self.measured]
        if failed:
            m = failed[0]
            raise RunFailed(f"metric {m}: every one of the {self.rows[m]} verdict(s) is an error, nothing was measured; "
                            f"first error, {mask(self.first_error.get(m, '?'))}")


def judge(split: SplitConfig, prompts: pd.DataFrame, rollouts: pd.DataFrame,
          metric_settings: dict[str, dict[str, Any]] | None = None, metrics: list[Any] | None = None,
          config: EvalConfig | None = None) -> pd.DataFrame:
    """One row per sample and metric. The frame is built column by column (a list per column, not a dict per row):
    the same values and dtypes, without a Python dict per judgement. `config`: the project's, for the metrics
    that read project-wide settings (`judges:`, `sandbox:`, `rate_limits:`)."""
    adapter = adapter_for(split)
    specs = metrics if metrics is not None else adapter.metrics()
    trace_cols = [c for c in ("trajectory", "tool_trace", "stop_reason") if c in rollouts.columns]  # [tools]
    for side, frame in (("prompts", prompts), ("rollouts", rollouts)):
        # one row per sample on each side, as merge's validate="one_to_one" would check, from one hash table of
        # the ids instead of its MultiIndex per side (which cost twice the merge itself)
        if not frame["sample_id"].is_unique:
            raise DataError(f"{split.key}: a sample id occurs more than once in the {side} being judged; sample ids "
                            f"must be unique within a split (materialize {side} again)")
    merged = prompts.merge(rollouts[["sample_id", "status", "error", "prediction", "raw_output", *trace_cols]],
                           on="sample_id", how="left")
    n = len(merged)
    targets, predictions = _strings(merged["target"]), _strings(merged["prediction"])
    ok = [i for i, s in enumerate(merged["status"].tolist()) if s == "ok"]
    errors = merged["error"].tolist()
    router = SourceRouter.of(split.key, split.options)
    sources: list[str | None] = []
    if router is not None:
        metas = [_loads(m, {}) for m in (merged["metadata"] if "metadata" in merged else [None] * n)]
        router.check(merged["sample_id"].tolist(), metas)
        sources = [router.source(m) for m in metas]
    routed: list[list[bool] | None] = []  # [routing] per metric: which samples it judges (None: all)
    per_metric: list[dict[str, list[Any]]] = []
    for spec in specs:
        metric = build_metric(spec, metric_settings, config)
        judge_fp = fingerprint(metric.identity())
        judged = [router.judges(metric.name, src) for src in sources] if router is not None else None
        routed.append(None if judged is None or all(judged) else judged)
        rows = [i for i in ok if (targets[i] is not None or not metric.requires_target)
                and (judged is None or judged[i])]  # the samples it scores
        got = metric.score_columns([targets[i] for i in rows], [predictions[i] for i in rows])
        if got is None:  # a metric scoring JudgeInputs
            got = ScoreColumns.of(asyncio.run(metric.ascore_many(_judge_inputs(merged, rows, targets, predictions,
                                                                               metric.inputs))))
        if len(rows) < n or len(got) != n:  # the others: unscored without a target, else the rollout's error
            got = _place_verdicts(got, rows, n, lambda i: Score.unscored() if targets[i] is None and metric.requires_target
                                 else Score(value=0.0, correct=False, status="error",
                                            reason=f"rollout failed: {errors[i]}"))
        per_metric.append({
            "metric": [metric.name] * n, "score": got.value, "correct": got.correct, "status": got.status,
            "reason": got.reason, "normalized_prediction": got.normalized_prediction,
            "normalized_target": got.normalized_target, "details": [_json(d) if d else None for d in got.details],
            "judge_fingerprint": [judge_fp] * n})
    if not per_metric or not n:
        return pd.DataFrame([])
    # sample-major (each sample's metrics together), in prompt order: every per-sample table of a partition is
    # then in the same order, which lets later stages read them side by side batch by batch (docs/scale.md)
    k = len(per_metric)

    def each(values: list[Any]) -> list[Any]:  # a per-sample value on each of the sample's k rows
        return values if k == 1 else [v for v in values for _ in range(k)]

    def verdict(column: str) -> list[Any]:  # the metrics' values, sample by sample
        return [v for group in zip(*(m[column] for m in per_metric)) for v in group]

    out = pd.DataFrame({
        "benchmark_split": [split.key] * (n * k), "model": each(merged["model"].tolist()),
        "sample_id": each(merged["sample_id"].tolist()), "metric": verdict("metric"), "score": verdict("score"),
        "correct": verdict("correct"), "status": verdict("status"), "reason": verdict("reason"),
        "prediction": each(predictions), "normalized_prediction": verdict("normalized_prediction"),
        "target": each(targets), "normalized_target": verdict("normalized_target"),
        "slices": each(merged["slices"].tolist()), "details": verdict("details"),
        "judge_fingerprint": verdict("judge_fingerprint"),
    })
    if any(r is not None for r in routed):  # [routing] no row for a metric on a sample of another source
        keep = [True if r is None else r[i] for i in range(n) for r in routed]
        out = out[keep].reset_index(drop=True)
    return out


def _place_verdicts(got: ScoreColumns, rows: list[int], n: int, other: Callable[[int], Score]) -> ScoreColumns:
    """All n samples' verdicts: `got`'s for the samples at positions `rows` (in order), `other(i)` for the rest."""
    at = dict(zip(rows, range(len(got))))
    others = {i: other(i) for i in range(n) if i not in at}
    picks = [at.get(i) for i in range(n)]
    return ScoreColumns(*([col[k] if k is not None else getattr(others[i], f.name) for i, k in enumerate(picks)]
                          for f, col in ((f, getattr(got, f.name)) for f in dataclasses.fields(ScoreColumns))))


def _strings(column: pd.Series) -> list[str | None]:
    return [v if isinstance(v, str) else None for v in column.tolist()]


def _judge_inputs(merged: pd.DataFrame, rows: list[int], targets: list[str | None], predictions: list[str | None],
                  fields: frozenset[str] | None) -> list[JudgeInput]:
    """The JudgeInputs of `rows` (positions in a merged prompts+rollouts frame), fresh ones for each metric. Of
    the stored JSON (metadata; [tools] the trace, docs/interfaces.md) only the `fields` the metric reads (None:
    all) are decoded; the others keep JudgeInput's defaults."""
    def col(name: str) -> list[Any]:  # the column's values at `rows` (None where the frame lacks the column)
        if name not in merged.columns:
            return [None] * len(rows)
        values = merged[name].tolist()
        return [values[i] for i in rows]

    decoded: dict[str, list[Any]] = {}
    if fields is None or "metadata" in fields:
        decoded["metadata"] = [_loads(m, {}) for m in col("metadata")]
    if fields is None or "tool_calls" in fields:
        decoded["tool_calls"] = [_loads(t, []) for t in col("tool_trace")]
    if fields is None or "trajectory" in fields:
        decoded["trajectory"] = [t if isinstance(t, list) else [] for t in (_loads(t, []) for t in col("trajectory"))]
    if fields is None or "tools" in fields:
        decoded["tools"] = [_loads(t, None) for t in col("tools")]
    if fields is None or "stop_reason" in fields:
        decoded["stop_reason"] = [s if isinstance(s, str) else None for s in col("stop_reason")]
    extras = [dict(zip(decoded, values)) for values in zip(*decoded.values())] if decoded else [{}] * len(rows)
    raw_outputs = col("raw_output")
    return [JudgeInput(sample_id=s, input=p, target=targets[i], prediction=predictions[i],
                       raw_output=raw if isinstance(raw, str) else None, **extra)
            for i, s, p, raw, extra in zip(rows, col("sample_id"), col("prompt_text"), raw_outputs, extras)]


# ---- metrics and leaderboard ------------------------------------------------------------------------------------
def compute_metrics(split_key: str, model_key: str, judgements: pd.DataFrame, seed: int = 0,
                    rollouts: pd.DataFrame | None = None, split: SplitConfig | None = None) -> pd.DataFrame:
    """Metric rows per slice; with `rollouts`, also the partition's latency/token/cost rows (slice `usage`).
    With `split`, a split with 0 samples (`limit: 0`, a filter matching nothing) gets n=0 rows for its metrics."""
    reducer = str(split.options.get("epochs_reducer") or "mean") if split is not None else "mean"
    df = aggregate(judgements, seed=seed, rollouts=rollouts, reducer=reducer,
                   epochs=split_epochs(split) if split is not None else None)
    if split is not None and not len(judgements):
        names = [m if isinstance(m, str) else m.get("name") for m in adapter_for(split).metrics()]
        nan = float("nan")
        empty = pd.DataFrame([{"metric": str(n), "slice": "all", "value": nan, "n": 0, "n_unscored": 0, "n_errors": 0,
                               "stderr": nan, "ci_low": nan, "ci_high": nan}
                              for n in names if n and n not in set(df.get("metric", []))])
        df = pd.concat([df, empty], ignore_index=True) if len(df) else empty
    adapter = adapter_for(split) if split is not None and len(judgements) else None
    if adapter is not None and (type(adapter).calculate_metrics is not Adapter.calculate_metrics
                                or adapter.options.get("calculate_metrics")):  # (no second epoch pass without one)
        extra = benchmark_summary_rows(split, adapter, reduce_epochs(judgements.reset_index(drop=True), reducer,
                                                                     split_epochs(split)))
        if len(extra):
            df = pd.concat([df, extra], ignore_index=True) if len(df) else extra
    df["benchmark_split"], df["model"] = split_key, model_key
    return with_directions(df)  # (the n=0 rows above get theirs too)


_SUMMARY_DEFAULTS = {"slice": "all", "n_unscored": 0, "n_errors": 0, "stderr": float("nan"),
                     "ci_low": float("nan"), "ci_high": float("nan")}


def benchmark_summary_rows(split: SplitConfig, adapter: Adapter, judgements: pd.DataFrame) -> pd.DataFrame:
    """The rows the split's adapter (or its `calculate_metrics:` function) computes from the per-sample judgements
    (Adapter.calculate_metrics), with the metrics table's defaults filled in: slice `all`, n = the samples judged,
    no CI. A row without a string `metric` or a numeric `value` fails the partition, naming the split."""
    rows = adapter.calculate_metrics(judgements) or []
    if isinstance(rows, pd.DataFrame):
        rows = rows.to_dict("records")
    n = int(judgements["sample_id"].nunique())
    out = []
    for i, row in enumerate(rows):
        value = row.get("value") if isinstance(row, dict) else None
        if not isinstance(row, dict) or not isinstance(row.get("metric"), str) or isinstance(value, bool) \
                or not isinstance(value, (int, float)) and value is not None:
            raise RunFailed(f"{split.key}: calculate_metrics row {i} must be a dict with a string 'metric' and a "
                            f"numeric 'value', got {row!r}")
        out.append({**_SUMMARY_DEFAULTS, "n": n, **row, "value": float("nan") if value is None else float(value)})
    return pd.DataFrame(out)
