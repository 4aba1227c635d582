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
failure; a slot of a process that died is taken back). On every store: SQLite (one machine; a dead holder's slot is
taken back at once, by its pid), Redis and Postgres (several machines: a slot is a lease of `LEASE_S` seconds on the
store's clock, renewed by the holding process every third of it while held; a killed holder's slots come back when
their lease runs out).
"""
from __future__ import annotations

import asyncio
import contextvars
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
LEASE_S = 30.0  # an in-flight slot's lease on a Redis or Postgres store (renewed every third of it while held)


def _holder() -> str:
    """Who holds a slot (host:pid), in the slot's id: for reading the store, never for deciding."""
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


class _Renewer:
    """Renews the leases of the slots this process holds on a remote store, every third of the lease, from a daemon
    thread (restarted in a forked child: a celery prefork worker). `renew({slot: key})` is the store's."""

    def __init__(self, renew: Any, lease_s: float):
        self.renew, self.period = renew, lease_s / 3
        self.held: dict[str, str] = {}
        self.lock = threading.Lock()
        self.pid: int | None = None

    def add(self, key: str, slot: str) -> None:
        with self.lock:
            if self.pid != os.getpid():  # first slot in this process, or a fork inherited the dict but no thread
                self.held.clear()
                self.pid = os.getpid()
                threading.Thread(target=self._loop, args=(self.pid,), name="evalpipe-lease", daemon=True).start()
            self.held[slot] = key

    def drop(self, slot: str) -> None:
        with self.lock:
            self.held.pop(slot, None)

    def _loop(self, pid: int) -> None:
        while self.pid == pid:
            time.sleep(self.period)
            with self.lock:
                held = dict(self.held)
            if held:
                try:
                    self.renew(held)
                except Exception:  # the store unreachable for a moment: the next round tries again
                    pass


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
        raise ConfigError(f"rate_limits.limits.{key}.max_in_flight needs a store that keeps it (a SQLite file, "
                          f"redis://... or postgresql://... in rate_limits.store); {type(self).__name__} keeps "
                          f"rpm/tpm only")

    def leave(self, key: str, slot: str) -> None:
        raise NotImplementedError

    def spent(self, ledgers: list[str]) -> dict[str, tuple[float, float]]:
        """(tokens, cost) spent so far per budget ledger (`budget:`)."""
        raise ConfigError(f"budget: needs the SQLite store (one machine: leave rate_limits.store out, or name a "
                          f"SQLite file); {type(self).__name__} keeps rpm/tpm only")

    def charge(self, ledgers: list[str], tokens: float, cost: float) -> None:
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

    def _spend_table(self, con: sqlite3.Connection) -> None:
        if not getattr(self._local, "spend", False):
            con.execute("CREATE TABLE IF NOT EXISTS spend (ledger TEXT PRIMARY KEY, tokens REAL NOT NULL, "
                        "cost REAL NOT NULL, requests INTEGER NOT NULL, t REAL)")
            self._local.spend = True

    def spent(self, ledgers: list[str]) -> dict[str, tuple[float, float]]:
        con = self._con()
        self._spend_table(con)
        if not ledgers:
            return {}
        rows = con.execute(f"SELECT ledger, tokens, cost FROM spend WHERE ledger IN ({','.join('?' * len(ledgers))})",
                           ledgers).fetchall()
        return {r[0]: (float(r[1]), float(r[2])) for r in rows}

    def charge(self, ledgers: list[str], tokens: float, cost: float) -> None:
        """Add one reply's tokens and cost to each ledger, in one transaction (an upsert per ledger)."""
        con = self._con()
        self._spend_table(con)
        con.execute("BEGIN IMMEDIATE")
        try:
            now = time.time()
            con.executemany("INSERT INTO spend VALUES (?, ?, ?, 1, ?) ON CONFLICT(ledger) DO UPDATE SET "
                            "tokens = tokens + excluded.tokens, cost = cost + excluded.cost, "
                            "requests = requests + 1, t = excluded.t", [(k, tokens, cost, now) for k in ledgers])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise


class PostgresStore(_Store):
    """Several machines: a table in Postgres (the Dagster instance's database will do), a transaction-scoped
    advisory lock per key, the server's clock."""

    def __init__(self, url: str, lease_s: float = LEASE_S):
        import psycopg2

        self._connect = lambda: psycopg2.connect(url.replace("postgresql+psycopg2://", "postgresql://"))
        self._local = threading.local()
        self.lease_s = lease_s
        self._renewer = _Renewer(self._renew, lease_s)
        with self._con() as con, con.cursor() as cur:
            # (two processes creating the tables at once on a fresh database: one waits on the other's lock)
            cur.execute("SELECT pg_advisory_xact_lock(hashtext('evalpipe-rate:schema'))")
            cur.execute("CREATE TABLE IF NOT EXISTS evalpipe_rate_grants (id TEXT PRIMARY KEY, key TEXT, "
                        "t DOUBLE PRECISION, amount DOUBLE PRECISION)")
            cur.execute("CREATE INDEX IF NOT EXISTS evalpipe_rate_grants_key_t ON evalpipe_rate_grants (key, t)")
            cur.execute("CREATE TABLE IF NOT EXISTS evalpipe_in_flight (id TEXT PRIMARY KEY, key TEXT NOT NULL, "
                        "expires DOUBLE PRECISION NOT NULL)")
            cur.execute("CREATE INDEX IF NOT EXISTS evalpipe_in_flight_key ON evalpipe_in_flight (key)")

    def _con(self):
        con = getattr(self._local, "con", None)
        if con is None or con.closed or getattr(self._local, "pid", None) != os.getpid():
            # (a forked child, e.g. a celery prefork worker, opens its own: a connection is not shared across fork)
            con = self._local.con = self._connect()
            self._local.pid = os.getpid()
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

    def enter(self, key: str, max_in_flight: int) -> str | None:
        """One in-flight slot of `key` (a row with a lease) if fewer than `max_in_flight` live ones exist, else
        None; rows whose lease ran out (their holder died) are deleted first. Under the key's advisory lock."""
        con = self._con()
        sid = f"{_holder()}:{uuid.uuid4().hex}"
        with con, con.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("evalpipe-in-flight:" + key,))
            cur.execute("SELECT extract(epoch FROM clock_timestamp())::float8")
            now = float(cur.fetchone()[0])
            cur.execute("DELETE FROM evalpipe_in_flight WHERE key = %s AND expires < %s", (key, now))
            cur.execute("SELECT count(*) FROM evalpipe_in_flight WHERE key = %s", (key,))
            if int(cur.fetchone()[0]) >= max_in_flight:
                return None
            cur.execute("INSERT INTO evalpipe_in_flight VALUES (%s, %s, %s)", (sid, key, now + self.lease_s))
        self._renewer.add(key, sid)
        return sid

    def leave(self, key: str, slot: str) -> None:
        self._renewer.drop(slot)
        con = self._con()
        with con, con.cursor() as cur:
            cur.execute("DELETE FROM evalpipe_in_flight WHERE id = %s", (slot,))

    def _renew(self, held: dict[str, str]) -> None:
        con = self._con()
        with con, con.cursor() as cur:
            cur.execute("UPDATE evalpipe_in_flight SET expires = extract(epoch FROM clock_timestamp())::float8 + %s "
                        "WHERE id = ANY(%s)", (self.lease_s, list(held)))


class RedisStore(_Store):
    """Several machines: a sorted set (time) and a hash (tokens) per key, under a Redis lock; Redis's clock."""

    # a slot: a member of the key's sorted set, scored by when its lease ends (Redis's clock); one script, atomic
    _ENTER = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3])) + 60)
return 1
"""
    _RENEW = """
local t = redis.call('TIME')
local until_ = tonumber(t[1]) + tonumber(t[2]) / 1e6 + tonumber(ARGV[1])
for i, k in ipairs(KEYS) do
  redis.call('ZADD', k, 'XX', until_, ARGV[i + 1])
  redis.call('EXPIRE', k, math.ceil(tonumber(ARGV[1])) + 60)
end
return 1
"""

    def __init__(self, url: str, lease_s: float = LEASE_S):
        import redis

        self.r = redis.Redis.from_url(url)
        self.lease_s = lease_s
        self._enter, self._renew_script = self.r.register_script(self._ENTER), self.r.register_script(self._RENEW)
        self._renewer = _Renewer(self._renew, lease_s)

    @staticmethod
    def _slots(key: str) -> str:
        return f"evalpipe:in_flight:{key}"

    def enter(self, key: str, max_in_flight: int) -> str | None:
        """One in-flight slot of `key` if fewer than `max_in_flight` unexpired leases exist, else None (leases that
        ran out, of holders that died, are dropped first)."""
        sid = f"{_holder()}:{uuid.uuid4().hex}"
        if not self._enter(keys=[self._slots(key)], args=[max_in_flight, sid, self.lease_s]):
            return None
        self._renewer.add(key, sid)
        return sid

    def leave(self, key: str, slot: str) -> None:
        self._renewer.drop(slot)
        self.r.zrem(self._slots(key), slot)

    def _renew(self, held: dict[str, str]) -> None:
        self._renew_script(keys=[self._slots(k) for k in held.values()], args=[self.lease_s, *held])

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


# ---- spend budgets (`budget:`) --------------------------------------------------------------------------------------
# A hard cap on tokens and/or cost, counted in the same shared store as the rate limits, so every partition, run
# and worker process of a scope draws on one ledger (docs/spend.md):
#
#     budget:
#       run:  {tokens: 2000000, cost_usd: 20}   # one `evalpipe run` (all its partitions), or one Dagster run
#       tick: {cost_usd: 100}                   # one backfill, or one sensor tick (all the runs it launched)
#       day:  {cost_usd: 250}                   # the whole project, per UTC day
#
# Rule: a request is sent only while every scope it counts against has spent less than its cap; what a reply
# cost is added once it is back. So requests stop at the cap, the ones in flight finish, and the spend ends
# above the cap by at most what those in-flight requests cost. Judges' calls count like the rollouts'.

BUDGET_SCOPES = ("run", "tick", "day")
BUDGET_KEYS = ("tokens", "cost_usd")
BUDGET_RUN_TAG = "evalpipe/budget_run"  # the tag `evalpipe run` gives every Dagster run it launches: one `run` scope


class BudgetExhausted(RuntimeError):
    """A request was not sent: a budget scope had spent its cap. Rows it stops are `status: error` with an error
    starting `stopped by budget`; they are not journaled, so a re-run (with a larger cap) sends exactly them."""


STOPPED_PREFIX = "stopped by budget"


@dataclass(frozen=True)
class Cap:
    scope: str  # run | tick | day
    ledger: str  # the ledger's key in the store, e.g. run:<id>, tick:<backfill id>, day:<project>:<date>
    tokens: float | None = None
    cost_usd: float | None = None


def check_budget(raw: Any) -> list[tuple[tuple[str, ...], str]]:
    """Why `budget:` can't be honoured, as (place under `budget`, message) pairs; empty when it can."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        return [((), "expected a mapping of run/tick/day to {tokens, cost_usd}, e.g. {run: {cost_usd: 20}}")]
    out = []
    for scope, caps in raw.items():
        if scope not in BUDGET_SCOPES:
            out.append(((str(scope),), f"unknown scope {scope!r}; use run, tick or day"))
            continue
        if not isinstance(caps, dict) or not caps:
            out.append(((scope,), "expected {tokens: N} and/or {cost_usd: X}"))
            continue
        for k, v in caps.items():
            if k not in BUDGET_KEYS:
                out.append(((scope, str(k)), f"unknown key {k!r}; use tokens or cost_usd"))
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                out.append(((scope, k), f"a positive number, got {v!r}"))
    return out


def _check(raw: Any) -> None:
    issues = check_budget(raw)
    if issues:
        where, msg = issues[0]
        raise ConfigError(f"budget{''.join('.' + w for w in where)}: {msg}")


class Budget:
    """The caps one request counts against (its run's, its tick's, the project's today), over a shared store."""

    def __init__(self, store: "_Store", caps: list[Cap]):
        self.store, self.caps = store, caps
        self._stopped: str | None = None

    def stopped(self) -> str | None:
        """None while every cap has room; else why not (`stopped by budget run: 1.0012 of 1 USD spent`). Once a
        cap is reached it stays reached for this object (no flapping while in-flight replies are settled)."""
        if self._stopped is not None:
            return self._stopped
        spent = self.store.spent([c.ledger for c in self.caps])
        for c in self.caps:
            tokens, cost = spent.get(c.ledger, (0.0, 0.0))
            if c.tokens is not None and tokens >= c.tokens:
                self._stopped = f"{STOPPED_PREFIX} {c.scope}: {tokens:.0f} of {c.tokens:g} tokens spent"
            elif c.cost_usd is not None and cost >= c.cost_usd:
                self._stopped = f"{STOPPED_PREFIX} {c.scope}: {cost:.6g} of {c.cost_usd:g} USD spent"
            if self._stopped:
                return self._stopped
        return None

    def charge(self, tokens: float, cost: float) -> None:
        """Add one reply's usage to every cap's ledger (one short transaction)."""
        if tokens or cost:
            self.store.charge([c.ledger for c in self.caps], float(tokens or 0), float(cost or 0))

    def status(self) -> list[dict[str, Any]]:
        """Per cap: scope, spent tokens and cost, and the caps (for progress lines and run metadata)."""
        spent = self.store.spent([c.ledger for c in self.caps])
        return [{"scope": c.scope, "tokens": spent.get(c.ledger, (0.0, 0.0))[0], "cost_usd":
                 spent.get(c.ledger, (0.0, 0.0))[1], "tokens_cap": c.tokens, "cost_usd_cap": c.cost_usd}
                for c in self.caps]

    def line(self) -> str:
        """`spend run $0.41/$1.00, 8.2k/50k tok` (one short text per cap)."""
        parts = []
        for s in self.status():
            bits = []
            if s["cost_usd_cap"] is not None:
                bits.append(f"${s['cost_usd']:.4g}/${s['cost_usd_cap']:g}")
            if s["tokens_cap"] is not None:
                bits.append(f"{s['tokens']:.0f}/{s['tokens_cap']:g} tok")
            parts.append(f"{s['scope']} " + ", ".join(bits))
        return "spend " + "; ".join(parts) if parts else ""


def budget_ledgers(run_id: str | None = None, tick_id: str | None = None, project: str | None = None,
                   day: str | None = None) -> dict[str, str]:
    """The ledger keys of each scope for a run: its run id, its backfill's or sensor tick's id, the project and the
    UTC day (today's unless given)."""
    import datetime as _dt

    day = day or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    out = {"day": f"day:{project or '-'}:{day}"}
    if run_id:
        out["run"] = f"run:{run_id}"
    if tick_id:
        out["tick"] = f"tick:{tick_id}"
    return out


def tick_of(tags: dict[str, str] | None) -> str | None:
    """A run's backfill id, or its sensor's name and tick id (Dagster's run tags); None outside both."""
    tags = tags or {}
    if tags.get("dagster/backfill"):
        return str(tags["dagster/backfill"])
    if tags.get("dagster/sensor_name") and tags.get("dagster/tick"):
        return f"{tags['dagster/sensor_name']}:{tags['dagster/tick']}"
    return None


def budget_for(section: Any, ledgers: dict[str, str], rate_limits: dict[str, Any] | None = None) -> Budget | None:
    """The Budget of `budget:` (`section`) for a run whose scopes have the `ledgers` keys (`budget_ledgers`);
    None when no cap applies. A cap whose scope the run doesn't have (a `tick` cap outside a backfill) is left out.
    The store is the rate limits' (`rate_limits.store`): a SQLite file on one machine."""
    if not section:
        return None
    _check(section)
    caps = [Cap(scope, ledgers[scope], section[scope].get("tokens"), section[scope].get("cost_usd"))
            for scope in BUDGET_SCOPES if scope in section and scope in ledgers]
    if not caps:
        return None
    store = store_for((rate_limits or {}).get("store"))
    if type(store).spent is _Store.spent:
        store.spent([])  # refused in one line, before any request
    return Budget(store, caps)


_ACTIVE: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("evalpipe_budget", default=None)


def active_budget() -> Budget | None:
    """The budget the wiring (a Dagster asset, `evalpipe.api`) set for the work under way in this context."""
    return _ACTIVE.get()


class spend_scope:
    """`with spend_scope(budget):` every request the driver sends inside (rollouts, judges) counts against it."""

    def __init__(self, budget: Budget | None):
        self.budget = budget

    def __enter__(self) -> Budget | None:
        self._token = _ACTIVE.set(self.budget)
        return self.budget

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE.reset(self._token)


def run_budget(config_raw: dict[str, Any], run_id: str | None, tags: dict[str, str] | None,
               project: str) -> Budget | None:
    """The Budget of one Dagster run of a project (its `budget:` and `rate_limits:` sections): the `run` scope is
    the `evalpipe run` that launched it (tag `evalpipe/budget_run`), else the Dagster run itself; the `tick` scope
    its backfill or sensor tick; the `day` scope the project (`project`: its config file) today, UTC."""
    tags = tags or {}
    ledgers = budget_ledgers(tags.get(BUDGET_RUN_TAG) or run_id, tick_of(tags), project)
    return budget_for(config_raw.get("budget"), ledgers, config_raw.get("rate_limits"))


def stopped_rows(errors: Any) -> int:
    """How many of `errors` (a rollouts frame's `error` column) are rows a budget stopped."""
    return sum(1 for e in errors if isinstance(e, str) and e.startswith(STOPPED_PREFIX))
