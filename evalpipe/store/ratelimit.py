"""Rate limits shared by every run and worker that calls the same provider key: requests and tokens per minute,
enforced across processes (and machines) through a store they all reach.

Config (top-level `rate_limits:`, docs/deployment.md#rate-limits):

    rate_limits:
      store: redis://redis:6379/0     # or postgresql://user@host/db, or a SQLite file path;
                                      # default: $DAGSTER_HOME/ratelimits.sqlite (one machine); env EVALS_RATE_LIMIT_STORE
      limits:
        openai: {rpm: 500, tpm: 200000}
        team-b: {rpm: 60}
        http://gpu-box:8000/v1: {max_in_flight: 256}   # an endpoint (a model's api_base): requests at once
        my-model: {max_in_flight: 8}                   # a model (its config key)

A model's limit key is its `options.rate_limit_key`, else its provider (`openai` for `openai/gpt-4o-mini`),
else its config key (`evalpipe.runners.api.limit_key`). Models sharing a key share the limit: separate
`evalpipe run`s, backfill runs, celery workers.

Semantics: a sliding window. No window of `window_s` seconds (60 for per-minute limits) ever holds more than
`rpm` requests, nor more than `tpm` tokens, counted at the moment each request is granted (with a guard, `guard_s`, default 5% of
the window and at most 1 s, between a booking leaving the window and the next one taking its place: requests
reach the provider a little after their grant). A request asks
the store for the earliest such moment (one short transaction under the store's lock), books it, and sleeps
until then; grants are first come, first served. Tokens aren't known before a reply: the booking carries the
driver's estimate (prompt characters / 4 + max_tokens) and is corrected to the real usage afterwards.
The per-run limits (`rpm`/`tpm` under a model's options) still apply on top, in process.

`max_in_flight`: requests under way at once for that key, whatever the partitions, runs and worker processes
(each request holds a slot of its model's key, then of its endpoint's, from before it is sent until its reply or
failure; a slot of a process that died is taken back). It needs the SQLite store (one machine).
"""
from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.core.errors import ConfigError
from evalpipe.store.sqlite_files import use_wal

STORE_ENV = "EVALS_RATE_LIMIT_STORE"
SQLITE_WAIT_S = 60.0  # how long a booking waits for the shared SQLite file before it fails


@dataclass(frozen=True)
class Limit:
    rpm: float | None = None
    tpm: float | None = None
    window_s: float = 60.0  # the metering window; per-minute limits scale to it (rpm * window_s / 60 per window)
    guard_s: float | None = None  # extra spacing after a booking leaves the window; default 5% of it, at most 1 s
    max_in_flight: int | None = None  # requests under way at once, across every run and process sharing the store

    @property
    def guard(self) -> float:
        return self.guard_s if self.guard_s is not None else min(0.05 * self.window_s, 1.0)

    @property
    def max_requests(self) -> float | None:
        return None if self.rpm is None else self.rpm * self.window_s / 60.0

    @property
    def max_tokens(self) -> float | None:
        return None if self.tpm is None else self.tpm * self.window_s / 60.0


def next_slot(booked: list[tuple[float, float]], now: float, amount: float, limit: Limit) -> float:
    """The earliest time >= now, and not before the last booking, at which one more request of `amount` tokens
    keeps every window within the limit. `booked`: (time, tokens) of the grants still in the window, sorted."""
    s = max([now] + [t for t, _ in booked[-1:]])
    max_req, max_tok = limit.max_requests, limit.max_tokens
    if max_tok is not None:
        amount = min(amount, max_tok)  # a request larger than the whole window still gets through, alone
    lo = 0
    while True:
        while lo < len(booked) and booked[lo][0] <= s - limit.window_s:
            lo += 1
        inside = booked[lo:]
        over_req = max_req is not None and len(inside) + 1 > max_req
        over_tok = max_tok is not None and sum(a for _, a in inside) + amount > max_tok
        if not (over_req or over_tok):
            return s
        # wait until the oldest booking has left the window, plus a guard (5% of the window, at most 1 s): a
        # request lands a little after its grant (scheduling, network), and the provider's clock counts that
        s = booked[lo][0] + limit.window_s + limit.guard


class _Store:
    """Bookings per key, under a lock that every process shares."""

    def book(self, key: str, amount: float, limit: Limit) -> tuple[str, float, float]:
        """(booking id, granted time, the store's now), both times on the store's clock."""
        raise NotImplementedError

    def settle(self, key: str, booking: str, amount: float) -> None:
        raise NotImplementedError

    def enter(self, key: str, max_in_flight: int) -> str | None:
        raise ConfigError(f"rate_limits.limits.{key}.max_in_flight needs the SQLite store (one machine: leave "
                          f"rate_limits.store out, or name a SQLite file); {type(self).__name__} keeps rpm/tpm only")

    def leave(self, key: str, slot: str) -> None:
        raise NotImplementedError


class SqliteStore(_Store):
    """One machine: a SQLite file (WAL), `BEGIN IMMEDIATE` as the cross-process lock."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()

    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(self.path, timeout=SQLITE_WAIT_S, isolation_level=None)
            try:
                use_wal(con, SQLITE_WAIT_S)
            except sqlite3.Error:
                con.close()
                raise
            con.execute("PRAGMA synchronous=NORMAL")
            con.execute("CREATE TABLE IF NOT EXISTS grants (id TEXT PRIMARY KEY, key TEXT, t REAL, amount REAL)")
            con.execute("CREATE INDEX IF NOT EXISTS grants_key_t ON grants (key, t)")
            self._local.con = con
        return con

    def book(self, key: str, amount: float, limit: Limit) -> tuple[str, float, float]:
        con = self._con()
        con.execute("BEGIN IMMEDIATE")
        try:
            now = time.time()
            con.execute("DELETE FROM grants WHERE key = ? AND t <= ?", (key, now - limit.window_s))
            booked = con.execute("SELECT t, amount FROM grants WHERE key = ? ORDER BY t", (key,)).fetchall()
            slot = next_slot(booked, now, amount, limit)
            bid = uuid.uuid4().hex
            con.execute("INSERT INTO grants VALUES (?, ?, ?, ?)", (bid, key, slot, amount))
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return bid, slot, now

    def settle(self, key: str, booking: str, amount: float) -> None:
        self._con().execute("UPDATE grants SET amount = ? WHERE id = ?", (amount, booking))

    def enter(self, key: str, max_in_flight: int) -> str | None:
        """One in-flight slot of `key` if fewer than `max_in_flight` are held (its id), else None. Slots of a
        process that died (kill -9) are taken back first."""
        con = self._con()
        con.execute("CREATE TABLE IF NOT EXISTS in_flight (id TEXT PRIMARY KEY, key TEXT, pid INTEGER, t REAL)")
        con.execute("BEGIN IMMEDIATE")
        try:
            held = con.execute("SELECT id, pid FROM in_flight WHERE key = ?", (key,)).fetchall()
            if len(held) >= max_in_flight:
                from evalpipe.core.procs import pid_alive

                dead = [(i,) for i, pid in held if pid != os.getpid() and not pid_alive(pid)]
                con.executemany("DELETE FROM in_flight WHERE id = ?", dead)
                if len(held) - len(dead) >= max_in_flight:
                    con.execute("COMMIT")
                    return None
            sid = uuid.uuid4().hex
            con.execute("INSERT INTO in_flight VALUES (?, ?, ?, ?)", (sid, key, os.getpid(), time.time()))
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return sid

    def leave(self, key: str, slot: str) -> None:
        self._con().execute("DELETE FROM in_flight WHERE id = ?", (slot,))


class PostgresStore(_Store):
    """Several machines: a table in Postgres (the Dagster instance's database will do), a transaction-scoped
    advisory lock per key, the server's clock."""

    def __init__(self, url: str):
        import psycopg2

        self._connect = lambda: psycopg2.connect(url.replace("postgresql+psycopg2://", "postgresql://"))
        self._local = threading.local()
        with self._con() as con, con.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS evalpipe_rate_grants (id TEXT PRIMARY KEY, key TEXT, "
                        "t DOUBLE PRECISION, amount DOUBLE PRECISION)")
            cur.execute("CREATE INDEX IF NOT EXISTS evalpipe_rate_grants_key_t ON evalpipe_rate_grants (key, t)")

    def _con(self):
        con = getattr(self._local, "con", None)
        if con is None or con.closed:
            con = self._local.con = self._connect()
        return con

    def book(self, key: str, amount: float, limit: Limit) -> tuple[str, float, float]:
        con = self._con()
        with con, con.cursor() as cur:  # one transaction; the advisory lock ends with it
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("evalpipe-rate:" + key,))
            cur.execute("SELECT extract(epoch FROM clock_timestamp())::float8")
            now = float(cur.fetchone()[0])
            cur.execute("DELETE FROM evalpipe_rate_grants WHERE key = %s AND t <= %s", (key, now - limit.window_s))
            cur.execute("SELECT t, amount FROM evalpipe_rate_grants WHERE key = %s ORDER BY t", (key,))
            slot = next_slot([(float(t), float(a)) for t, a in cur.fetchall()], now, amount, limit)
            bid = uuid.uuid4().hex
            cur.execute("INSERT INTO evalpipe_rate_grants VALUES (%s, %s, %s, %s)", (bid, key, slot, amount))
        return bid, slot, now

    def settle(self, key: str, booking: str, amount: float) -> None:
        con = self._con()
        with con, con.cursor() as cur:
            cur.execute("UPDATE evalpipe_rate_grants SET amount = %s WHERE id = %s", (amount, booking))


class RedisStore(_Store):
    """Several machines: a sorted set (time) and a hash (tokens) per key, under a Redis lock; Redis's clock."""

    def __init__(self, url: str):
        import redis

        self.r = redis.Redis.from_url(url)

    def book(self, key: str, amount: float, limit: Limit) -> tuple[str, float, float]:
        times, amounts = f"evalpipe:rate:{key}:t", f"evalpipe:rate:{key}:a"
        with self.r.lock(f"evalpipe:rate:{key}:lock", timeout=10, blocking_timeout=120, sleep=0.002):
            sec, usec = self.r.time()
            now = sec + usec / 1e6
            old = self.r.zrangebyscore(times, "-inf", now - limit.window_s)
            pipe = self.r.pipeline()
            if old:
                pipe.zrem(times, *old).hdel(amounts, *old)
            pipe.zrange(times, 0, -1, withscores=True).hgetall(amounts)
            res = pipe.execute()
            rows, amt = res[-2], res[-1]
            booked = [(float(score), float(amt.get(member, 0))) for member, score in rows]
            slot = next_slot(booked, now, amount, limit)
            bid = uuid.uuid4().hex
            ttl = int(limit.window_s * 2 + 60)
            self.r.pipeline().zadd(times, {bid: slot}).hset(amounts, bid, amount).expire(times, ttl) \
                .expire(amounts, ttl).execute()
        return bid, slot, now

    def settle(self, key: str, booking: str, amount: float) -> None:
        amounts = f"evalpipe:rate:{key}:a"
        if self.r.hexists(amounts, booking):
            self.r.hset(amounts, booking, amount)


_stores: dict[str, _Store] = {}
_stores_lock = threading.Lock()


def store_for(spec: str | None) -> _Store:
    """A store from `rate_limits.store` (or EVALS_RATE_LIMIT_STORE); default: SQLite under $DAGSTER_HOME."""
    spec = os.environ.get(STORE_ENV) or spec
    if not spec:
        from evalpipe.core.config import dagster_home

        spec = str(dagster_home() / "ratelimits.sqlite")
    with _stores_lock:
        if spec not in _stores:
            if spec.startswith(("redis://", "rediss://", "unix://")):
                _stores[spec] = RedisStore(spec)
            elif spec.startswith(("postgresql://", "postgres://", "postgresql+psycopg2://")):
                _stores[spec] = PostgresStore(spec)
            elif "://" in spec:
                raise ConfigError(f"rate_limits.store {spec!r}: use redis://..., postgresql://... or a SQLite file path")
            else:
                _stores[spec] = SqliteStore(spec)
        return _stores[spec]


def _parse_limit(name: str, raw: Any) -> Limit:
    unknown = set(raw) - {"rpm", "tpm", "window_s", "guard_s", "max_in_flight"} if isinstance(raw, dict) else ()
    if unknown:
        raise ConfigError(f"rate_limits.limits.{name}: unknown key(s) {sorted(unknown)}; allowed: rpm, tpm, "
                          "max_in_flight, window_s, guard_s")
    if not isinstance(raw, dict) or not ({"rpm", "tpm", "max_in_flight"} & set(raw)):
        raise ConfigError(f"rate_limits.limits.{name}: expected a mapping with rpm, tpm and/or max_in_flight, "
                          "e.g. {rpm: 500, max_in_flight: 64}")
    flight = raw.get("max_in_flight")
    if flight is not None and (isinstance(flight, bool) or not isinstance(flight, int) or flight < 1):
        raise ConfigError(f"rate_limits.limits.{name}.max_in_flight: a whole number >= 1, got {flight!r}")
    try:
        lim = Limit(rpm=float(raw["rpm"]) if raw.get("rpm") is not None else None,
                    tpm=float(raw["tpm"]) if raw.get("tpm") is not None else None,
                    window_s=float(raw.get("window_s", 60.0)),
                    guard_s=float(raw["guard_s"]) if raw.get("guard_s") is not None else None,
                    max_in_flight=flight)
    except (TypeError, ValueError):
        raise ConfigError(f"rate_limits.limits.{name}: rpm, tpm and window_s must be numbers") from None
    if any(v is not None and v <= 0 for v in (lim.rpm, lim.tpm, lim.window_s)):
        raise ConfigError(f"rate_limits.limits.{name}: rpm, tpm and window_s must be positive")
    if lim.max_requests is not None and lim.max_requests < 1:
        raise ConfigError(f"rate_limits.limits.{name}: rpm x window_s / 60 must allow at least one request")
    return lim


def check_limit(name: str, raw: Any) -> str | None:
    """Why `rate_limits.limits.<name>` can't be honoured (the config check's message, which names the place
    itself: without the `rate_limits.limits.<name>` prefix), or None."""
    try:
        _parse_limit(name, raw)
    except ConfigError as exc:
        msg, prefix = str(exc), f"rate_limits.limits.{name}"
        return msg[len(prefix):].lstrip(":. ") if msg.startswith(prefix) else msg
    return None


class SharedLimiter:
    """The driver's limiter interface (`acquire`/`settle`) over a shared store, for one provider key."""

    def __init__(self, store: _Store, key: str, limit: Limit):
        self.store, self.key, self.limit = store, key, limit
        self._pending: dict[int, list[str]] = {}

    async def acquire(self, estimated_tokens: int) -> None:
        amount = float(estimated_tokens) if self.limit.tpm is not None else 0.0
        bid, slot, now = await asyncio.to_thread(self.store.book, self.key, amount, self.limit)
        task = asyncio.current_task()
        self._pending.setdefault(id(task), []).append(bid)
        if slot > now:
            await asyncio.sleep(slot - now)

    def settle(self, estimated_tokens: int, used_tokens: int | None) -> None:
        ids = self._pending.get(id(asyncio.current_task()))
        if not ids:
            return
        bid = ids.pop()
        if not ids:
            self._pending.pop(id(asyncio.current_task()), None)
        if self.limit.tpm is not None and used_tokens is not None and used_tokens != estimated_tokens:
            try:
                self.store.settle(self.key, bid, float(used_tokens))
            except Exception:  # a correction that can't be written leaves the estimate booked: safe side
                pass


class Limiters:
    """Several limiters in a row (the run's own, then the shared one): acquire all, settle all."""

    def __init__(self, *limiters: Any):
        self.limiters = [x for x in limiters if x is not None]

    async def acquire(self, estimated_tokens: int) -> None:
        for x in self.limiters:
            await x.acquire(estimated_tokens)

    def settle(self, estimated_tokens: int, used_tokens: int | None) -> None:
        for x in self.limiters:
            x.settle(estimated_tokens, used_tokens)


class InFlight:
    """`max_in_flight` of one or more limit keys (an endpoint's, a model's): a slot of each, held while a request
    is under way, shared by every run and process on the store. In process, a semaphore per key keeps all but
    `max_in_flight` waiters off the store; they poll it, briefly, for a slot another process gave back."""

    POLL_S = (0.005, 0.05)  # first and longest wait between two looks at the store

    def __init__(self, store: _Store, budgets: list[tuple[str, int]]):
        self.store, self.budgets = store, budgets  # in a fixed order: no two holders wait on each other
        self._local = {key: asyncio.Semaphore(n) for key, n in budgets}

    async def enter(self) -> list[tuple[str, str]]:
        held: list[tuple[str, str]] = []
        try:
            for key, n in self.budgets:
                await self._local[key].acquire()
                wait = self.POLL_S[0]
                try:
                    while True:
                        slot = await asyncio.to_thread(self.store.enter, key, n)
                        if slot is not None:
                            break
                        await asyncio.sleep(wait)
                        wait = min(self.POLL_S[1], wait * 2)
                except BaseException:
                    self._local[key].release()
                    raise
                held.append((key, slot))
        except BaseException:
            self.leave(held)
            raise
        return held

    def leave(self, held: list[tuple[str, str]]) -> None:
        for key, slot in reversed(held):
            try:
                self.store.leave(key, slot)
            finally:
                self._local[key].release()


def in_flight_budget(keys: list[str | None], rate_limits: dict[str, Any] | None = None) -> InFlight | None:
    """The `max_in_flight` budgets that apply to a model's requests: of each of `keys` (its config key and limit
    key first, then its endpoint, `api_base`) that `rate_limits.limits` gives one; None when none does."""
    section = rate_limits or {}
    limits = section.get("limits") or {}
    budgets = []
    for key in dict.fromkeys(k for k in keys if k):
        if key in limits:
            lim = _parse_limit(key, limits[key])
            if lim.max_in_flight is not None:
                budgets.append((key, lim.max_in_flight))
    if not budgets:
        return None
    store = store_for(section.get("store"))
    if type(store).enter is _Store.enter:  # refused before any request is sent
        store.enter(budgets[0][0], budgets[0][1])
    return InFlight(store, budgets)


def shared_limiter(key: str | None, rate_limits: dict[str, Any] | None = None) -> SharedLimiter | None:
    """The shared limiter for a provider key (a model's key is `evalpipe.runners.api.limit_key`: the runners know
    the providers), or None when `rate_limits` (the project's `rate_limits:` section, handed in by the caller)
    sets none for it."""
    if key is None:
        return None
    section = rate_limits or {}
    limits = section.get("limits") or {}
    if key not in limits:
        return None
    lim = _parse_limit(key, limits[key])
    if lim.rpm is None and lim.tpm is None:  # only max_in_flight: in_flight_budget keeps it
        return None
    return SharedLimiter(store_for(section.get("store")), key, lim)
