"""Calls to judge models, through the same runner machinery as the models under test.

A judge model is a `ModelConfig` (any runner: `litellm` for any provider, or a test runner). Its calls go
through `evalpipe.runners.run_requests` (concurrency, timeouts, retries) and a journal used as a judge cache:
the key is the judge's identity (runner, model, decoding params) plus the exact messages sent, which contain
the sample and the prediction. So an identical (judge, sample, prediction) triple is never judged twice, in
this run, in a later run, or for another model that gave the same answer.
"""
from __future__ import annotations

import asyncio
import dataclasses
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.core.turns import waiting
from evalpipe.core.config import EvalConfig, ModelConfig, dagster_home
from evalpipe.core.errors import ConfigError, RunFailed
from evalpipe.core.fingerprint import fingerprint
from evalpipe.store.journal import Journal
from evalpipe.store.ratelimit import STOPPED_PREFIX, stopped_rows
from evalpipe.core.types import RolloutRequest

# Judges decode greedily with a fixed seed unless a judge entry says otherwise.
JUDGE_DEFAULT_PARAMS = {"temperature": 0, "seed": 0}
# Settings of model-graded metrics that change how calls are made, not what the verdicts are: kept out of the
# metric's identity (and so out of the judge fingerprint and the cache key).
CALL_SETTINGS = ("concurrency", "timeout_s", "max_retries")


# Keys being judged right now in this process, by (cache file, key): partitions evaluated at once (threads of
# one `evalpipe run`) often send the same (judge, sample, prediction); the second waits for the first's verdict
# instead of paying for it again.
_IN_FLIGHT: dict[tuple[str, str], threading.Event] = {}
_IN_FLIGHT_LOCK = threading.Lock()


def _claim(cache: Path, keys: list[str]) -> tuple[list[str], list[str], list[threading.Event]]:
    """(keys this caller sends, keys another caller is sending, the events that mark those as done)."""
    mine, theirs, events = [], [], []
    with _IN_FLIGHT_LOCK:
        for k in keys:
            event = _IN_FLIGHT.get((str(cache), k))
            if event is None:
                _IN_FLIGHT[(str(cache), k)] = threading.Event()
                mine.append(k)
            else:
                theirs.append(k)
                events.append(event)
    return mine, theirs, events


def _release(cache: Path, keys: list[str]) -> None:
    with _IN_FLIGHT_LOCK:
        for k in keys:
            _IN_FLIGHT.pop((str(cache), k)).set()


def judge_cache_path() -> Path:
    """One cache for all partitions, so identical pairs are shared across models and splits."""
    return dagster_home() / "journal" / "judge_cache.sqlite"


def resolve_judge(spec: Any, name_hint: str = "judge", config: EvalConfig | None = None) -> ModelConfig:
    """A judge model from a metric setting: a name under `judges:` of `config` (the caller's project), or an
    inline mapping."""
    if isinstance(spec, str):
        if config is None:  # (a caller's mistake: the metrics stage hands the project's config in)
            raise ConfigError(f"judge {spec!r} is a name under 'judges:', but no config was given to look it up in; "
                              f"build the metric with config=<the project's EvalConfig> or give the judge inline")
        raw = config.judges.get(spec)
        if raw is None:
            known = ", ".join(sorted(config.judges)) or "none"
            raise ConfigError(f"unknown judge {spec!r} (judges in {config.path}: {known}); add it under 'judges:'")
        name = spec
    elif isinstance(spec, dict):
        raw, name = spec, str(spec.get("name") or spec.get("model") or name_hint)
        raw = {k: v for k, v in raw.items() if k != "name"}
    else:
        raise ConfigError(f"judge {spec!r} must be a name under 'judges:' or a mapping with 'runner' and 'model'")
    model = ModelConfig.from_dict(name, raw)
    return model.with_overrides(params={**JUDGE_DEFAULT_PARAMS, **model.params})


def judges_from_settings(settings: dict[str, Any], metric: str, config: EvalConfig | None = None) -> list[ModelConfig]:
    """`judge: x` or `judges: [x, y]`; neither: the first entry of `judges:` in `config` (the caller's project)."""
    specs = settings.get("judges")
    if specs is None and settings.get("judge") is not None:
        specs = [settings["judge"]]
    if specs is None:
        if config is None or not config.judges:
            where = config.path if config is not None else "the config"
            raise ConfigError(f"metric {metric!r} needs a judge model: add one under 'judges:' in {where} "
                              f"or set 'judge' in the metric's settings")
        specs = [next(iter(config.judges))]
    if isinstance(specs, (str, dict)):
        specs = [specs]
    models = [resolve_judge(s, f"judge{i}", config) for i, s in enumerate(specs)]
    if len({m.key for m in models}) != len(models):
        raise ConfigError(f"metric {metric!r}: judges must have distinct names, got {[m.key for m in models]}")
    return models


@dataclass
class Reply:
    text: str | None
    error: str | None = None
    cached: bool = False  # not paid for by this call: the judge cache's, or a duplicate of another item's
    input_tokens: int | None = None  # [spend] the call's usage, as the endpoint counted it
    output_tokens: int | None = None
    cost: float | None = None
    latency_s: float | None = None

    def usage(self) -> dict[str, Any]:
        """The call's usage for a verdict's details; a cached reply cost nothing here (`cached: true`)."""
        if self.cached:
            return {"cached": True, "input_tokens": 0, "output_tokens": 0, "cost": 0.0, "latency_s": 0.0}
        return {"cached": False, "input_tokens": int(self.input_tokens or 0), "output_tokens":
                int(self.output_tokens or 0), "cost": float(self.cost or 0.0), "latency_s": float(self.latency_s or 0.0)}


@dataclass
class CallStats:
    calls: int = 0
    cached: int = 0
    input_tokens: int = 0  # [spend] of the calls sent (not the cached ones)
    output_tokens: int = 0
    cost: float = 0.0


class JudgeClient:
    """Sends batches of chat messages to one judge model. Identical messages in a batch are sent once."""

    def __init__(self, model: ModelConfig, settings: dict[str, Any] | None = None, cache: Path | None = None,
                 rate_limits: dict[str, Any] | None = None):
        """`rate_limits`: the project's `rate_limits:` section (provider-key limits shared across processes)."""
        from evalpipe.runners import build_runner

        self.model = model
        self.settings = settings or {}
        self.rate_limits = rate_limits
        self.cache = cache or judge_cache_path()
        self._build = build_runner
        self.identity = build_runner(model).identity()
        self.stats = CallStats()

    def key(self, messages: list[dict[str, Any]], attempt: int = 0) -> str:
        # attempt > 0: a fresh call for the same messages (a procedure that re-asks after an unreadable reply),
        # cached under its own key; attempt 0 keeps the keys of earlier versions
        return fingerprint({"judge": self.identity, "messages": messages, **({"attempt": attempt} if attempt else {})})

    async def ask_many(self, batch: list[list[dict[str, Any]]], attempt: int = 0) -> list[Reply]:
        from evalpipe.runners import RunSettings

        keys = [self.key(m, attempt) for m in batch]
        unique: dict[str, list[dict[str, Any]]] = {}
        for k, m in zip(keys, batch):
            unique.setdefault(k, m)
        run = RunSettings(concurrency=self.settings.get("concurrency"),
                          timeout_s=float(self.settings.get("timeout_s", 120.0)),
                          max_retries=int(self.settings.get("max_retries", 4)), rate_limits=self.rate_limits)
        by_key: dict[str, Reply] = {}
        mine, theirs, events = _claim(self.cache, list(unique))
        try:
            await self._send({k: unique[k] for k in mine}, run, by_key)
        finally:
            _release(self.cache, mine)
        if theirs:  # answered by the caller that claimed them: read from the cache (sent here only if it failed)
            # [sweeps] the claimer may be another partition of this batch run that needs a turn to finish its call:
            # this one gives its turn up while it waits (evalpipe/core/turns.py), or the two would wait on each other
            with waiting():
                await asyncio.to_thread(lambda: [e.wait() for e in events])
            await self._send({k: unique[k] for k in theirs}, run, by_key)
        out, paid = [], set()
        for k in keys:  # a batch's duplicate messages were sent once: the call's usage goes to the first of them
            reply = by_key[k]
            if k in paid and not reply.cached:
                reply = dataclasses.replace(reply, cached=True)
            paid.add(k)
            out.append(reply)
        return out

    async def _send(self, unique: dict[str, list[dict[str, Any]]], run: Any, by_key: dict[str, Reply]) -> None:
        from evalpipe.runners import run_requests

        if not unique:
            return
        requests = [RolloutRequest(sample_id=f"judge:{k[:12]}", messages=m, fingerprint=k) for k, m in unique.items()]
        runner = self._build(self.model)  # the driver closes it at the end of the batch
        with Journal(self.cache) as journal:
            rows = await run_requests(runner, requests, journal, run)
        stopped = stopped_rows(row.get("error") for row in rows)
        if stopped:  # [spend] unfinished judging fails its partition (never ranked); what was judged is cached
            first = next(r["error"] for r in rows if str(r.get("error") or "").startswith(STOPPED_PREFIX))
            raise RunFailed(f"judge {self.model.key!r}: {stopped} of {len(rows)} call(s) not sent, {first}; the "
                            "others are in the judge cache: raise `budget:` and run again to finish")
        for req, row in zip(requests, rows):
            cached = bool(row.get("cached"))
            self.stats.cached += cached
            self.stats.calls += not cached
            if not cached:
                self.stats.input_tokens += int(row.get("input_tokens") or 0)
                self.stats.output_tokens += int(row.get("output_tokens") or 0)
                self.stats.cost += float(row.get("cost") or 0.0)
            if row.get("status") == "ok":
                by_key[req.fingerprint] = Reply(text=row.get("raw_output") or "", cached=cached,
                                                input_tokens=row.get("input_tokens"),
                                                output_tokens=row.get("output_tokens"), cost=row.get("cost"),
                                                latency_s=row.get("latency_s"))
            else:
                by_key[req.fingerprint] = Reply(text=None, error=str(row.get("error") or "judge call failed"))

    def ask_many_sync(self, batch: list[list[dict[str, Any]]]) -> list[Reply]:
        return asyncio.run(self.ask_many(batch))
