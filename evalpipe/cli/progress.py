"""Per-sample progress of one `evalpipe run`, across all its partitions: done/total, rate, ETA, errors so far.

The launcher (`eval_assets/launch.py evaluate(on_sample=..., on_progress=...)`) calls `SampleProgress.sample`
as each sample of a partition's rollouts finishes (the rollouts asset reports through
`evalpipe.pipeline.sample_progress`, in this process) and `SampleProgress.step` when a run starts or fails.
Three renderings: live with rich in a terminal, a plain line every few seconds when stderr is not a TTY
(CI logs), nothing with `--no-progress`.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, TextIO


@dataclass
class _Part:
    done: int = 0
    total: int = 0
    errors: int = 0


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "-"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def fmt_rate(per_s: float | None) -> str:
    if not per_s:
        return "-/s"
    return f"{per_s:.1f}/s" if per_s >= 0.95 else f"{per_s * 60:.1f}/min"


class SampleProgress:
    """Totals over every partition of a run. Thread-safe; `render` is called with a one-line summary."""

    def __init__(self, render: Callable[[str, "SampleProgress"], None] | None = None, clock=time.monotonic,
                 min_interval_s: float = 0.0):
        self._parts: dict[tuple[str, str], _Part] = {}
        self._lock = threading.Lock()
        self._clock = clock
        self._start = clock()
        self._first_sample_at: float | None = None
        self._first_done = 0
        self._last_sample_at: float | None = None
        self._render = render
        self._min_interval = min_interval_s
        self._last_render = -1e18
        self.label = "starting"
        self.failed_runs = 0
        self.spend: Callable[[], str] | None = None  # [spend] the run's spend against its `budget:` caps
        self._spend_text, self._spend_at = "", -1e18

    # ---- fed by the launcher ----------------------------------------------------------------------------
    def sample(self, split: str, model: str, done: int, total: int, errors: int | None = None) -> None:
        with self._lock:
            p = self._parts.setdefault((split, model), _Part())
            if self._first_sample_at is None:
                # samples already in the journal arrive at once: measure the rate from here on
                self._first_sample_at, self._first_done = self._clock(), self.done + done
            if done > p.done:
                self._last_sample_at = self._clock()
            p.done, p.total = done, total
            if errors is not None:
                p.errors = errors
            self.label = f"{split} x {model}"
        self._emit(force=done == total)

    def step(self, done_runs: int, total_runs: int, label: str) -> None:
        with self._lock:
            if " failed" in label:
                self.failed_runs += 1
            self.label = label
        self._emit(force=True)

    # ---- read by renderers ------------------------------------------------------------------------------
    @property
    def done(self) -> int:
        return sum(p.done for p in self._parts.values())

    @property
    def total(self) -> int:
        return sum(p.total for p in self._parts.values())

    @property
    def errors(self) -> int:
        return sum(p.errors for p in self._parts.values())

    @property
    def partitions(self) -> int:
        return len(self._parts)

    def rate(self) -> float | None:
        """Samples per second since the first sample that needed the model."""
        if self._first_sample_at is None:
            return None
        # up to now while samples are still coming; up to the last one once every partition is done
        end = self._last_sample_at if self.total and self.done >= self.total and self._last_sample_at else self._clock()
        elapsed = end - self._first_sample_at
        new = self.done - self._first_done
        return new / elapsed if elapsed > 0 and new > 0 else None

    def eta_s(self) -> float | None:
        r = self.rate()
        return (self.total - self.done) / r if r else None

    def line(self) -> str:
        r = self.rate()
        parts = [f"{self.done}/{self.total} samples" if self.total else "loading",
                 fmt_rate(r), f"ETA {fmt_duration(self.eta_s())}",
                 f"{self.errors} error(s)" + (f", {self.failed_runs} failed run(s)" if self.failed_runs else ""),
                 f"{self.partitions} partition(s)", f"elapsed {fmt_duration(self._clock() - self._start)}"]
        if self.spend is not None:  # read from the shared store at most once a second
            now = self._clock()
            if now - self._spend_at >= 1.0:
                try:
                    self._spend_text = self.spend()
                except Exception:  # a progress line never fails a run
                    pass
                self._spend_at = now
            if self._spend_text:
                parts.append(self._spend_text)
        return " | ".join(parts)

    def _emit(self, force: bool = False) -> None:
        if self._render is None:
            return
        now = self._clock()
        if not force and now - self._last_render < self._min_interval:
            return
        self._last_render = now
        self._render(self.label, self)


class RichProgress:
    """Live in a terminal: one bar over all samples of the run, with rate, ETA and errors."""

    def __init__(self, stream: TextIO | None = None):
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn

        self.progress = SampleProgress(render=self._render, min_interval_s=0.1)
        self._bar = Progress(TextColumn("{task.description:<28.28}"), BarColumn(bar_width=16),
                             TextColumn("{task.fields[line]}"),
                             console=Console(file=stream or sys.stderr), transient=True, refresh_per_second=4)
        self._task = self._bar.add_task("starting", total=None, line="")

    def _render(self, label: str, p: SampleProgress) -> None:
        self._bar.update(self._task, completed=p.done, total=p.total or None, description=label, line=p.line())

    def __enter__(self) -> SampleProgress:
        self._bar.__enter__()
        return self.progress

    def __exit__(self, *exc) -> None:
        self._bar.__exit__(*exc)


class PlainProgress:
    """Not a terminal (CI logs): a plain line at most every `every_s` seconds, and when a partition finishes."""

    def __init__(self, stream: TextIO | None = None, every_s: float = 10.0):
        self.stream = stream or sys.stderr
        self.progress = SampleProgress(render=self._render, min_interval_s=every_s)

    def _render(self, label: str, p: SampleProgress) -> None:
        print(f"... {label}: {p.line()}", file=self.stream, flush=True)

    def __enter__(self) -> SampleProgress:
        return self.progress

    def __exit__(self, *exc) -> None:
        pass


class NoProgress:
    def __enter__(self) -> SampleProgress:
        return SampleProgress(render=None)

    def __exit__(self, *exc) -> None:
        pass


def reporter(enabled: bool = True, stream: TextIO | None = None):
    """The right rendering for where output goes: rich in a TTY, plain lines otherwise, nothing when disabled."""
    stream = stream or sys.stderr
    if not enabled:
        return NoProgress()
    if stream.isatty():
        return RichProgress(stream)
    return PlainProgress(stream)


@contextmanager
def keep_terminal():
    """Yield a stream on a copy of stderr's file descriptor, and put fds 1 and 2 back as they were on exit.

    In-process Dagster runs capture step output by pointing fds 1/2 at log files and back; runs in concurrent
    threads can interleave those swaps and leave the process writing into a step's log. The copy keeps the
    progress display on the terminal meanwhile; the restore brings the final summary back to it."""
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except (OSError, ValueError):
            pass
    try:
        saved = (os.dup(1), os.dup(2))
    except OSError:  # no real descriptors (embedded interpreters): nothing to protect
        yield sys.stderr
        return
    try:
        stream = os.fdopen(os.dup(saved[1]), "w", buffering=1, encoding=getattr(sys.stderr, "encoding", None) or "utf-8")
    except OSError:
        stream = sys.stderr
    try:
        yield stream
    finally:
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except (OSError, ValueError):
                pass
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
        if stream is not sys.stderr:
            try:
                stream.close()
            except OSError:
                pass


def spend_line(project: Any, tags: dict[str, str] | None) -> tuple[dict[str, str] | None, Callable[[], str] | None]:
    """(the tags for every Dagster run of one `evalpipe run`, a function giving its spend against its `budget:`
    caps as one short text, or None without a budget). The tag `evalpipe/budget_run` makes the command's runs one
    `run` scope (evalpipe/store/ratelimit.py); a cap that can't be honoured is refused here, before any call."""
    import uuid

    from evalpipe.store.ratelimit import BUDGET_RUN_TAG, run_budget

    cfg = project.config
    if not cfg.raw.get("budget"):
        return tags or None, None
    run_id = uuid.uuid4().hex
    tags = {**(tags or {}), BUDGET_RUN_TAG: run_id}
    budget = run_budget(cfg.raw, run_id, tags, str(cfg.path))
    return tags, (budget.line if budget is not None else None)
