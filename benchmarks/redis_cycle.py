"""Uncontended cycle on Redis: one client, one key, acquire + release.

Contenders, each on its own connection to the same server:

- ``PING``: one round trip and nothing else, the physical floor;
- redis-py ``Lock`` (SET NX PX, release by script) — the ratio baseline;
- python-redis-lock with ``auto_renewal`` off and on (a thread per lock);
- pottery ``Redlock`` with one master;
- lease_integrations raw store calls (``store.acquire`` + ``store.release``);
- lease_integrations ``LeaseLock.acquire``/``release``: the same plus the
  heartbeat registration, loss policy, metrics and logging a user gets.
"""

from __future__ import annotations

import statistics
import uuid
from typing import Any

from lease_integrations import LeaseLock, connect

from .harness import Contender, Result, count_sends, interleaved

TTL = 30.0  # long enough that no renewal or expiry happens inside a cycle
BASELINE = "redis-py Lock"
HOLD = "lease_integrations LeaseLock.hold()"
#: The same block with nothing armed: what arming fail-stop's death pipes costs.
HOLD_CHECK = "lease_integrations hold(), on_lost=check"


def _client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url)


def contenders(url: str) -> list[Contender]:
    import redis_lock  # type: ignore[import-untyped]
    from pottery import Redlock

    tag = uuid.uuid4().hex[:8]
    out: list[Contender] = []

    ping = _client(url)
    out.append(Contender("PING (floor)", lambda: ping.ping(), floor=True, close=ping.close,
                         note="1 round trip, nothing else"))

    rp = _client(url)
    rp_lock = rp.lock(f"bench:{tag}:redispy", timeout=TTL)

    def rp_acquire() -> Any:
        if not rp_lock.acquire(blocking=False):
            raise RuntimeError("redis-py Lock: uncontended acquire refused")
        return rp_lock

    out.append(Contender(BASELINE, rp_acquire, lambda lk: lk.release(), close=rp.close,
                         note="SET NX PX; release by script"))

    for renew in (False, True):
        prl = _client(url)
        prl_lock = redis_lock.Lock(prl, f"bench:{tag}:prl:{renew}", expire=int(TTL),
                                   auto_renewal=renew)

        def prl_acquire(lk: Any = prl_lock) -> Any:
            if not lk.acquire(blocking=False):
                raise RuntimeError("python-redis-lock: uncontended acquire refused")
            return lk

        out.append(Contender(f"python-redis-lock, auto_renewal={'on' if renew else 'off'}",
                             prl_acquire, lambda lk: lk.release(), close=prl.close,
                             note="renewal thread per lock" if renew else ""))

    pot = _client(url)
    redlock = Redlock(key=f"bench:{tag}:pottery", masters={pot}, auto_release_time=TTL)

    def pot_acquire() -> Any:
        if not redlock.acquire(blocking=False):
            raise RuntimeError("pottery Redlock: uncontended acquire refused")
        return redlock

    out.append(Contender("pottery Redlock, 1 master", pot_acquire, lambda lk: lk.release(),
                         close=pot.close))

    out.extend(lease_contenders(url, f"bench-{tag}"))
    check = connect(url)
    unarmed = LeaseLock(check, f"bench-{tag}-check", ttl=TTL, on_lost="check")

    def check_enter() -> Any:
        block = unarmed.hold()
        block.__enter__()
        return block

    out.append(Contender(HOLD_CHECK, check_enter, lambda block: block.__exit__(None, None, None),
                         close=check.close, note="the same block, no death pipe armed"))
    return out


def lease_contenders(url: str, key: str) -> list[Contender]:
    """The raw store cycle and the ``LeaseLock`` cycle, on any store URL."""
    raw_store = connect(url)
    holder = f"bench-holder-{uuid.uuid4().hex[:8]}"
    secret = uuid.uuid4().hex
    meta = {"host": "bench", "pid": 0}

    def raw_acquire() -> Any:
        result = raw_store.acquire(f"{key}-raw", holder, secret, TTL, meta)
        if not result.granted or result.record is None:
            raise RuntimeError("lease store: uncontended acquire refused")
        return result.record.token

    lock_store = connect(url)
    lock = LeaseLock(lock_store, f"{key}-lock", ttl=TTL)

    def lock_acquire() -> Any:
        return lock.acquire(wait=0)

    hold_store = connect(url)
    held = LeaseLock(hold_store, f"{key}-hold", ttl=TTL)

    def hold_enter() -> Any:  # `with held.hold(): pass`, split at the block
        block = held.hold()
        block.__enter__()
        return block

    return [
        Contender("lease_integrations store calls", raw_acquire,
                  lambda token: raw_store.release(f"{key}-raw", secret, token),
                  close=raw_store.close, note="store.acquire + store.release, no heartbeat"),
        Contender("lease_integrations LeaseLock", lock_acquire, lock.release,
                  close=lock_store.close, note="with heartbeat registration"),
        Contender(HOLD, hold_enter, lambda block: block.__exit__(None, None, None),
                  close=hold_store.close, note="with lock.hold(): pass (fail-stop armed)"),
    ]


def server_cpu_us(url: str, cs: list[Contender], cycles: int, rounds: int) -> list[float]:
    """redis-server's own CPU time (user + sys, from INFO) per cycle, for each
    contender: where the Lua scripts run. Each figure is the median of
    ``rounds`` interleaved samples of ``cycles`` cycles, less what the idle
    server spent in the same time (its timer, ``serverCron``): a slower
    cycle would otherwise be charged more of that clock work."""
    import time

    info = _client(url)

    def used() -> float:
        cpu = info.info("cpu")
        return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])

    def idle_per_s(seconds: float = 0.2) -> float:
        before, t0 = used(), time.monotonic()
        time.sleep(seconds)
        return (used() - before) / (time.monotonic() - t0)

    samples: list[list[float]] = [[] for _ in cs]
    try:
        for _ in range(rounds):
            idle = idle_per_s()
            for i, c in enumerate(cs):
                before, t0 = used(), time.monotonic()
                for _ in range(cycles):
                    handle = c.acquire()
                    if c.release is not None:
                        c.release(handle)
                spent = used() - before - idle * (time.monotonic() - t0)
                samples[i].append(max(0.0, spent) / cycles * 1e6)
        return [round(statistics.median(s), 1) for s in samples]
    finally:
        info.close()


def run(url: str, runs: int, seconds: float, log: Any, quick: bool = False) -> list[Result]:
    cs = contenders(url)
    try:
        results = interleaved(cs, runs, seconds, progress=lambda m: log(f"redis cycle: {m}"))
        for c, r in zip(cs, results):
            r.sends_per_cycle, r.sends_acquire = count_sends(c, 50 if quick else 200)
        for r, cpu in zip(results, server_cpu_us(url, cs, 300 if quick else 1000,
                                                 3 if quick else 5)):
            r.server_cpu_us = cpu
        return results
    finally:
        for c in cs:
            if c.close:
                c.close()
