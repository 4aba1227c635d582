"""Runs many requests through a runner: bounded concurrency, timeouts, retries, rate limits and the resume journal.

The hot path is kept cheap on purpose (it is what a 1000-sample run at concurrency 100 spends its CPU on):
a fixed pool of worker coroutines pulls from one shared iterator (never one task per sample, so 100k samples
hold at most `concurrency` requests in flight), each attempt is bounded by the run's one shared timer (`Deadlines`:
no timer and no extra task per attempt), and a finished sample costs one small JSON encode and a share of one
SQLite WAL commit (grouped).
"""
from __future__ import annotations

import asyncio
import collections
import random
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from evalpipe.core.config import ModelConfig
from evalpipe.core.jsontext import dumps
from evalpipe.store.journal import FLUSH_S, Journal
from evalpipe.core.redact import GENERATED_FIELDS, get_redactor, is_secret_name
from evalpipe.runners.base import ModelError, RetryableError, Runner
from evalpipe.runners.limits import RateLimiter, estimate_tokens
from evalpipe.runners.tool_loop import run_conversation, trace_fields
from evalpipe.core.turns import waiting
from evalpipe.core.types import Generation, RolloutRequest


@dataclass
class RunSettings:
    concurrency: int | None = None  # requests in flight; None: the runner's default
    timeout_s: float = 120.0  # per attempt
    max_retries: int = 4  # retries after the first attempt, on rate limits, 5xx, timeouts, dropped connections
    backoff_base_s: float = 0.5  # first retry waits about this long, doubling each time (with jitter)
    backoff_max_s: float = 30.0
    fail_fast: bool = False  # stop at the first sample that fails for good
    rpm: float | None = None  # requests per minute, across the run; None: unlimited
    tpm: float | None = None  # tokens (input + output) per minute, across the run; None: unlimited
    # the project's `rate_limits:` section: provider-key limits shared by every run and process (store/ratelimit.py)
    rate_limits: dict[str, Any] | None = None
    # a spend cap shared by every run and process of its scopes (store/ratelimit.py Budget, `budget:`); None: the
    # one the wiring set for this context (`spend_scope`), if any
    budget: Any = None


SETTING_KEYS = ("concurrency", "timeout_s", "max_retries", "backoff_base_s", "backoff_max_s", "fail_fast", "rpm", "tpm")


def run_settings_for(model: ModelConfig | None = None, rate_limits: dict[str, Any] | None = None,
                     **overrides: Any) -> RunSettings:
    """RunSettings for a model: `overrides` that are not None win, then the model's `options` of the same names
    (so a config entry may carry `concurrency: 32`, `rpm: 500`, `timeout_s: 300`), then the defaults.
    `rate_limits`: the project's `rate_limits:` section."""
    values: dict[str, Any] = {"rate_limits": rate_limits}
    for key in SETTING_KEYS:
        v = overrides.get(key)
        if v is None and model is not None:
            v = model.options.get(key)
        if v is not None:
            values[key] = v
    try:
        return RunSettings(**values)
    except TypeError as exc:  # pragma: no cover - keys are fixed above
        raise ValueError(str(exc)) from None


class FailFast(Exception):
    """Raised when fail_fast is set and a sample failed for good."""


# Columns every row carries, in this order (the rollouts table adds benchmark_split, model, prediction).
ROW_FIELDS = ("sample_id", "fingerprint", "status", "error", "raw_output", "raw_response", "finish_reason",
              "latency_s", "input_tokens", "output_tokens", "cost", "attempts", "trajectory")


def _failed(req: RolloutRequest, error: str, start: float, attempts: int) -> dict[str, Any]:
    return {"sample_id": req.sample_id, "fingerprint": req.fingerprint, "status": "error", "error": error,
            "raw_output": None, "raw_response": None, "finish_reason": None,
            "latency_s": time.perf_counter() - start, "input_tokens": None, "output_tokens": None, "cost": 0.0,
            "attempts": attempts, "trajectory": None}


def _ok(req: RolloutRequest, gen: Generation, start: float, attempts: int) -> dict[str, Any]:
    raw = gen.raw
    if raw is not None and not isinstance(raw, str):  # the fast path hands over the body text as received
        raw = dumps(raw)
    return {"sample_id": req.sample_id, "fingerprint": req.fingerprint, "status": "ok", "error": None,
            "raw_output": gen.text, "raw_response": raw, "finish_reason": gen.finish_reason,
            "latency_s": time.perf_counter() - start, "input_tokens": gen.input_tokens,
            "output_tokens": gen.output_tokens, "cost": gen.cost if gen.cost is not None else 0.0,
            "attempts": attempts,
            "trajectory": dumps(gen.trajectory) if gen.trajectory else None,  # json.dumps(.., ensure_ascii=False,
            # default=str), without building an encoder per call
            **(trace_fields(gen) if gen.stop_reason is not None or gen.tool_calls else {})}


class Deadlines:
    """The per-attempt time bound of one run's attempts, on one shared timer instead of one per attempt.

    Every attempt of a run gets the same `timeout_s`, so deadlines come in the order the attempts start: a queue in
    start order is also in deadline order, and one timer armed for the oldest open attempt's deadline is enough.
    `asyncio.timeout_at` per attempt schedules a timer (a TimerHandle pushed on the loop's heap) and cancels it
    again, ~3-5 us of CPU a sample; here an attempt costs a list and a queue append. When the timer fires it
    cancels each attempt past its deadline and re-arms for the next open one. The cancellation becomes TimeoutError
    exactly as `asyncio.timeout` makes it (`uncancel`, so a cancellation from outside still propagates)."""

    __slots__ = ("_loop", "_open", "_timer", "_armed")

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._open: collections.deque[list[Any]] = collections.deque()  # [deadline, task or None, cancelling, fired]
        self._timer: asyncio.TimerHandle | None = None
        self._armed = 0.0  # the deadline the timer is set for

    def enter(self, deadline: float) -> list[Any]:
        """Bound the current task until `deadline` (loop time, never earlier than any deadline entered before)."""
        task = asyncio.current_task()
        entry = [deadline, task, task.cancelling() if task is not None else 0, False]
        self._open.append(entry)
        if self._timer is None:
            self._arm(deadline)
        return entry

    def _arm(self, deadline: float) -> None:
        self._armed = deadline
        self._timer = self._loop.call_at(deadline, self._expire)

    def exit(self, entry: list[Any], exc: BaseException | None) -> None:
        """The attempt's bound ends; raises TimeoutError when it fired and `exc` is the cancellation it caused."""
        task, entry[1] = entry[1], None
        opened = self._open
        while opened and opened[0][1] is None:  # closed at the front: dropped (the rest wait behind an open one)
            opened.popleft()
        if entry[3] and task is not None and task.uncancel() <= entry[2] and isinstance(exc, asyncio.CancelledError):
            raise TimeoutError from exc

    async def bound(self, deadline: float, awaitable: Any) -> Any:
        """`await awaitable`, bounded by `deadline` (as `async with asyncio.timeout_at(deadline)` bounds it)."""
        entry = self.enter(deadline)
        try:
            result = await awaitable
        except BaseException as exc:
            self.exit(entry, exc)
            raise
        self.exit(entry, None)
        return result

    def close(self) -> None:
        """Stop the timer (the run is over: no attempt is open)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._open.clear()

    def _expire(self) -> None:
        self._timer = None
        # the loop runs a timer up to its clock's resolution early: what the timer was set for is due
        now, opened = max(self._loop.time(), self._armed), self._open
        while opened:
            entry = opened[0]
            if entry[1] is not None:
                if entry[0] > now:
                    self._arm(entry[0])
                    return
                entry[3] = True
                entry[1].cancel()
            opened.popleft()


async def attempt(runner: Runner, req: RolloutRequest, s: RunSettings, limiter: RateLimiter | None = None,
                  max_tokens: int | None = None, tools: Any = None,
                  deadlines: tuple[Deadlines, Deadlines] | None = None, in_flight: Any = None,
                  budget: Any = None) -> dict[str, Any]:
    """One sample, retried as the settings say; always returns a row (status ok or error), never raises.
    A request with `tools` is one whole conversation (evalpipe/runners/tool_loop.py) within `timeout_s`.
    `deadlines`: the run's shared timers for the per-attempt bounds, (one-shot requests, conversations)
    (`run_requests` passes them; without them each attempt schedules its own `asyncio.timeout_at`).
    `budget` (store/ratelimit.py Budget): checked just before the request is sent (after any rate-limit wait); a
    reached cap returns the row `stopped by budget ...` (status error, never journaled) without a call, and each
    reply's tokens and cost are charged to it."""
    start = time.perf_counter()
    attempts = 0
    loop = asyncio.get_running_loop()
    while True:
        attempts += 1
        retry_after = None
        estimate = 0
        if limiter is not None:
            estimate = estimate_tokens(req.messages, max_tokens)
            await limiter.acquire(estimate)
        # [scale] a slot of the model's and the endpoint's max_in_flight (rate_limits:), held until this attempt ends
        held = await in_flight.enter() if in_flight is not None else None
        deadline = loop.time() + s.timeout_s  # the attempt's bound, counted from before the runner's first step
        try:
            if budget is not None:  # [spend] a reached cap: not sent (those already in flight finish)
                why = budget.stopped()
                if why is not None:
                    if limiter is not None:
                        limiter.settle(estimate, 0)
                    return _failed(req, why, start, attempts - 1)
            if req.tools is not None and tools is not None:
                # the loop keeps its own time budget (stop_reason `timeout`); the outer bound is a safety net
                # (every model turn counts against rpm/tpm: the loop takes and settles turns after the first)
                conversation = run_conversation(runner, req, tools, s.timeout_s, limiter, estimate, max_tokens)
                if deadlines is None:
                    async with asyncio.timeout(s.timeout_s + 30):
                        gen = await conversation
                else:  # (as `Deadlines.bound`, inline: no coroutine frame between the task and each model turn)
                    bound = deadlines[1].enter(loop.time() + s.timeout_s + 30)
                    try:
                        gen = await conversation
                    except BaseException as exc:
                        deadlines[1].exit(bound, exc)
                        raise
                    deadlines[1].exit(bound, None)
            else:
                # an lm_eval log-likelihood sample on a runner that scores them apart from generate (API endpoints)
                ll = req.metadata and "loglikelihood_requests" in req.metadata \
                    and getattr(runner, "loglikelihood_generation", None)
                call = ll(req) if ll else runner.generate(req)
                if deadlines is None:
                    async with asyncio.timeout_at(deadline):
                        gen = await call
                else:  # the run's shared timer: the same bound, no timer of its own
                    bound = deadlines[0].enter(deadline)
                    try:
                        gen = await call
                    except BaseException as exc:
                        deadlines[0].exit(bound, exc)
                        raise
                    deadlines[0].exit(bound, None)
                if limiter is not None:
                    limiter.settle(estimate, (gen.input_tokens or 0) + (gen.output_tokens or 0))
            if budget is not None:
                await asyncio.to_thread(budget.charge, (gen.input_tokens or 0) + (gen.output_tokens or 0),
                                        gen.cost or 0.0)
            if gen.stop_reason == "timeout":  # traces kept, but not journaled: the next run tries it again
                row = _ok(req, gen, start, attempts)
                turns = f" ({gen.turns} model turns)" if gen.turns is not None else ""  # an agent counts no turns
                row.update(status="error", error=f"conversation timed out after {s.timeout_s:g}s{turns}")
                return row
            return _ok(req, gen, start, attempts)
        except TimeoutError:
            last_error = f"timeout after {s.timeout_s:g}s"
            if not runner.retry_timeouts:
                return _failed(req, last_error, start, attempts)
        except RetryableError as exc:
            last_error, retry_after = str(exc), exc.retry_after
        except ModelError as exc:
            return _failed(req, str(exc), start, attempts)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug or an unexpected reply: this sample fails, the run goes on
            return _failed(req, f"{type(exc).__name__}: {exc}", start, attempts)
        finally:
            if held:
                in_flight.leave(held)
        if limiter is not None:
            limiter.settle(estimate, 0)
        if attempts > s.max_retries:
            suffix = f" (after {attempts} attempts)" if attempts > 1 else ""
            return _failed(req, last_error + suffix, start, attempts)
        delay = min(s.backoff_max_s, s.backoff_base_s * 2 ** (attempts - 1))
        delay = delay * (0.5 + random.random() / 2)  # jitter: concurrent retries don't hit the server in lockstep
        if retry_after is not None:
            delay = max(delay, min(retry_after, max(s.backoff_max_s, 60.0)))  # honour Retry-After, bounded
        await asyncio.sleep(delay)


async def run_requests(runner: Runner, requests: Sequence[RolloutRequest], journal: Journal | None,
                       settings: RunSettings, progress: Callable[[int, int], None] | None = None,
                       close: bool = True, tools: Any = None, start: bool = True) -> list[dict[str, Any]]:
    """Rows for every request, in request order (fields: `ROW_FIELDS` + `cached`). Samples already in the
    journal are not sent again; each newly finished ok sample is committed to it as soon as it finishes.
    Failed samples are returned (status `error`) but not journaled, so the next run retries them.
    `close=False` keeps the runner open (a caller issuing several batches, e.g. a judge, the rollouts stage);
    `start=False` skips `runner.start()` (such a caller already started it for an earlier batch).
    `tools` (a `ToolEnv`): requests with `tools` set run as whole conversations through it.
    Journal commits are grouped: a finished sample is committed within `journal.FLUSH_S` (evalpipe/store/journal.py)."""
    requests = requests if isinstance(requests, list) else list(requests)
    done = journal.lookup([r.fingerprint for r in requests]) if journal is not None else {}
    results: list[dict[str, Any] | None] = [None] * len(requests)
    todo: list[int] = []
    for i, req in enumerate(requests):
        rec = done.get(req.fingerprint)
        if rec is not None:
            rec["sample_id"] = req.sample_id
            rec["cached"] = True
            results[i] = rec
        else:
            todo.append(i)
    del done
    total, finished, failed = len(requests), len(requests) - len(todo), 0
    progress = _with_errors(progress)  # [viewer/CLI] callbacks that take `errors` also get the failures so far
    if progress:
        progress(finished, total, failed)
    limiter = RateLimiter(settings.rpm, settings.tpm) if (settings.rpm or settings.tpm) else None
    from evalpipe.runners.api import limit_key
    from evalpipe.store.ratelimit import Limiters, in_flight_budget, shared_limiter

    # [scale] provider-key limits shared by all runs/workers (rate_limits:)
    shared = shared_limiter(limit_key(runner.model) if runner.model is not None else None, settings.rate_limits)
    if shared is not None:
        limiter = Limiters(limiter, shared)
    model = runner.model  # [scale] max_in_flight of the model (config key, limit key), then of its endpoint
    in_flight = in_flight_budget([model.key, limit_key(model), model.api_base], settings.rate_limits) \
        if model is not None else None
    max_tokens = runner.model.params.get("max_tokens") if runner.model is not None else None
    from evalpipe.store.ratelimit import active_budget

    budget = settings.budget if settings.budget is not None else active_budget()  # [spend] budget:
    pending = iter(todo)
    concurrency = max(1, settings.concurrency or runner.default_concurrency)
    redactor = get_redactor()  # once per run: looking it up per row costs a stat() of the config file each time
    loop = asyncio.get_running_loop()
    # the per-attempt bounds: one timer for the run's one-shot requests, one for its conversations (each list is
    # in deadline order only for one timeout: a conversation's safety net is 30 s longer)
    deadlines = (Deadlines(loop), Deadlines(loop))
    flush_at: list[Any] = []  # the scheduled group commit, if any

    def flush() -> None:
        flush_at.clear()
        journal.flush()

    def keep(i: int, row: dict[str, Any]) -> dict[str, Any]:
        """A model's answer to request i: redacted, journaled when ok (committed later), counted."""
        nonlocal finished, failed
        # [operations/redaction] secrets never reach the journal (or anything after); what the model wrote is
        # masked for known secrets only, so scored content (tool-call arguments) stays as the model sent it
        if not _plain_row(row, redactor):
            row = {k: (redactor.redact_generated(v) if k in GENERATED_FIELDS else redactor.redact_obj(v, k))
                   for k, v in row.items()}
        if row["status"] == "ok" and journal is not None:
            journal.record(requests[i].fingerprint, requests[i].sample_id, row, commit=False)
        row["cached"] = False
        results[i] = row
        finished += 1
        failed += row["status"] != "ok"
        return row

    async def worker() -> None:
        for i in pending:  # workers share one iterator: at most `concurrency` requests in flight
            req = requests[i]
            row = keep(i, await attempt(runner, req, settings, limiter, max_tokens, tools, deadlines, in_flight,
                                        budget))
            if journal is not None and not flush_at and journal.queued:  # committed at most FLUSH_S after it finished
                flush_at.append(loop.call_later(FLUSH_S, flush))
            if progress:
                progress(finished, total, failed)
            if row["status"] != "ok" and settings.fail_fast:
                raise FailFast(f"sample {req.sample_id} failed and fail_fast is set: {row['error']}")

    # [sweeps] what is left goes to the model: a batch run's other partitions compute meanwhile (core/turns.py)
    with waiting() if todo else nullcontext():
        try:
            if todo and getattr(runner, "batch_mode", False) and all(requests[i].tools is None for i in todo):
                # [spend] the provider's batch API: one batch for the partition's requests, its id journaled
                rows = await run_batch(runner, [requests[i] for i in todo], journal, budget)
                for i, row in zip(todo, rows):
                    keep(i, row)
                if progress:
                    progress(finished, total, failed)
                todo = []
            if todo:
                if start:
                    await runner.start()
                async with asyncio.TaskGroup() as tg:  # one failure (fail_fast) cancels the other workers
                    for _ in range(min(concurrency, len(todo))):
                        tg.create_task(worker())
        except BaseExceptionGroup as group:
            # Surface the first real error (FailFast, or a journal write failure) rather than the group.
            raise group.exceptions[0] from None
        finally:
            for handle in flush_at:
                handle.cancel()
            for d in deadlines:
                d.close()
            if journal is not None:
                journal.flush()  # whatever finished is committed before the rows are handed on (or the error raised)
            if close:
                await runner.aclose()
    return results  # type: ignore[return-value]


TERMINAL_BATCH = ("completed", "failed", "expired", "cancelled")


def _batch_ids(journal: Journal | None):
    """The journal's side file of batch ids (`<journal>.batches.sqlite`): (key -> batch id) across restarts."""
    import sqlite3

    if journal is None:
        return None
    con = sqlite3.connect(str(journal.path) + ".batches.sqlite", timeout=30, isolation_level=None)
    con.execute("CREATE TABLE IF NOT EXISTS batches (key TEXT PRIMARY KEY, batch_id TEXT, t REAL)")
    return con


async def run_batch(runner: Runner, requests: list[RolloutRequest], journal: Journal | None,
                    budget: Any = None) -> list[dict[str, Any]]:
    """Rows for `requests` sent as one batch through the runner's batch API (`submit_batch`, `poll_batch`,
    `batch_results`). The batch id is journaled under the requests' fingerprints before the first poll, so a
    restarted run polls the same batch instead of submitting (and paying for) it again; a batch that failed or
    expired is forgotten and its requests are submitted afresh by the next run. The budget counts the batch as
    one request: it is submitted only while every cap has room, and charged when its results arrive."""
    from evalpipe.core.fingerprint import fingerprint

    start = time.perf_counter()
    if budget is not None:
        why = budget.stopped()
        if why is not None:
            return [_failed(r, why, start, 0) for r in requests]
    key = fingerprint(sorted(r.fingerprint for r in requests))
    ids = _batch_ids(journal)
    try:
        found = ids.execute("SELECT batch_id FROM batches WHERE key = ?", (key,)).fetchone() if ids else None
        try:
            batch_id = found[0] if found else await runner.submit_batch(requests)
            if ids is not None and not found:
                ids.execute("INSERT OR REPLACE INTO batches VALUES (?, ?, ?)", (key, batch_id, time.time()))
            while True:
                batch = await runner.poll_batch(batch_id)
                if batch.get("status") in TERMINAL_BATCH:
                    break
                await asyncio.sleep(runner.batch_poll_s)
            results = await runner.batch_results(batch) if batch.get("status") == "completed" else {}
        except ModelError as exc:
            return [_failed(r, f"batch: {exc}", start, 1) for r in requests]
        if ids is not None and batch.get("status") != "completed":
            ids.execute("DELETE FROM batches WHERE key = ?", (key,))
        rows = []
        for r in requests:
            got = results.get(r.fingerprint)
            if isinstance(got, Generation):
                rows.append(_ok(r, got, start, 1))
            else:
                rows.append(_failed(r, str(got) if got is not None else
                                    f"batch {batch_id} {batch.get('status')}: no result for this request", start, 1))
        if budget is not None:
            gens = [g for g in results.values() if isinstance(g, Generation)]
            await asyncio.to_thread(budget.charge, sum((g.input_tokens or 0) + (g.output_tokens or 0) for g in gens),
                                    sum(g.cost or 0.0 for g in gens))
        return rows
    finally:
        if ids is not None:
            ids.close()


def _plain_row(row: dict[str, Any], redactor: Any) -> bool:
    """True when redacting the row field by field would change nothing: no secret-looking field name at any depth,
    every value a string, number, null or a plain list/dict of them (a conversation's tool-call records), and no
    string that could hold a secret (one `could_match` over all of them: it is substring tests, so what a string
    contains the joined text contains)."""
    keys = tuple(row)
    secret = _SECRET_FIELDS.get(keys)
    if secret is None:  # rows share their field names: decided once per set of names
        secret = _SECRET_FIELDS[keys] = any(is_secret_name(k) for k in keys)
    if secret:
        return False
    values = row.values()
    # the value types checked in one C pass; a row with others (lists, dicts, subclasses) is walked
    if _PLAIN_TYPES.issuperset(map(type, values)):
        texts = [v for v in values if type(v) is str]
    else:
        texts = []
        if not _plain_strings(values, texts):
            return False
    return not redactor.could_match("\n".join(texts))


def _plain_strings(values: Any, texts: list[str]) -> bool:
    """Collect the strings in `values` (nested plain lists and dicts) into `texts`; False where field-by-field
    redaction could change more than the strings say: a secret-looking key (its value is masked whole), a key that
    is not a string, a tuple or a list/dict subclass (redaction rebuilds those as plain lists and dicts). Any other
    value (numbers, None, objects) is left as it is by redaction."""
    for v in values:
        t = type(v)
        if t is str:
            texts.append(v)
        elif t is dict:
            if not _STR_ONLY.issuperset(map(type, v)):  # a key that is not a plain str
                return False
            keys = tuple(v)
            plain = _PLAIN_KEYS.get(keys)
            if plain is None:  # records share their keys (a conversation's tool-call records): decided once per set
                if len(_PLAIN_KEYS) > 4096:
                    _PLAIN_KEYS.clear()
                plain = _PLAIN_KEYS[keys] = not any(map(is_secret_name, keys))
            if not plain:
                return False
            if not _plain_strings(v.values(), texts):
                return False
        elif t is list:
            if not _plain_strings(v, texts):
                return False
        elif t in _PLAIN_TYPES:
            continue
        elif isinstance(v, str):
            texts.append(v)
        elif isinstance(v, (dict, list, tuple)):
            return False
    return True


_PLAIN_TYPES = frozenset({str, int, float, bool, type(None)})
_SECRET_FIELDS: dict[tuple, bool] = {}
_PLAIN_KEYS: dict[tuple, bool] = {}  # a nested dict's keys (plain str) -> none of them secret-looking
_STR_ONLY = frozenset({str})


def _with_errors(progress: Callable[..., None] | None) -> Callable[[int, int, int], None] | None:
    """A progress callback as (done, total, errors): callbacks declaring an `errors` parameter (or **kwargs) get
    the failed samples so far; plain (done, total) callbacks keep their signature. A callback whose third
    positional parameter is `errors` is returned as it is (it is called per sample: no wrapper call in between)."""
    if progress is None:
        return None
    import inspect

    try:
        params = inspect.signature(progress).parameters
    except (TypeError, ValueError):
        params = {}
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in params.values() if p.kind in kinds]
    if len(positional) >= 3 and positional[2].name == "errors" and positional[2].kind is kinds[1] \
            and all(p.default is not inspect.Parameter.empty for p in positional[3:]):
        return progress
    if "errors" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return lambda d, t, e: progress(d, t, errors=e)
    return lambda d, t, e: progress(d, t)


def run_sync(runner: Runner, requests: Iterable[RolloutRequest], journal: Journal | None, settings: RunSettings,
             progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    return asyncio.run(run_requests(runner, list(requests), journal, settings, progress))
