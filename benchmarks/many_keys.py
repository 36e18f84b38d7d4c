"""Many keys: one process holds N leases at once and the heartbeat keeps them
all alive. Measured over fixed wall-clock windows: the process's CPU time
(every thread, ``time.process_time``), renewals done, and requests sent to
Redis (client-side count), per second.

For contrast, python-redis-lock with ``auto_renewal`` renews the same number
of locks at the same rate with one thread per lock.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from typing import Any

from lease_integrations import LeaseLock, connect
from lease_integrations.keeper.client import get_keeper, keeps
from lease_integrations.keeper.heartbeat import get_heartbeat

from .harness import SendCounter

TTL = 6.0  # heartbeat every ttl/3 = 2 s: N/2 renewals per second


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) another process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _windows(windows: int, length: float, renewals: Any, counter: SendCounter,
             trust_left: Any = None, keeper: int | None = None) -> list[dict[str, float]]:
    """``keeper``: the keeper's pid: its CPU is counted apart and added to
    the per-renewal figure (it does the renewing); ``sends`` then counts this
    process's requests only (the keeper's go on its own connections)."""
    out = []
    for _ in range(windows):
        cpu0, wall0, ren0, sent0 = time.process_time(), time.monotonic(), renewals(), counter.count
        kcpu0 = process_cpu(keeper) if keeper else 0.0
        time.sleep(length)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        kcpu = process_cpu(keeper) - kcpu0 if keeper else 0.0
        ren, sent = renewals() - ren0, counter.count - sent0
        sample = {"cpu_pct": 100 * cpu / wall, "renewals_per_s": ren / wall,
                  "sends_per_s": sent / wall,
                  "cpu_us_per_renewal": (cpu + kcpu) / ren * 1e6 if ren else 0.0}
        if keeper:
            sample["keeper_cpu_pct"] = 100 * kcpu / wall
        if trust_left is not None:
            # A heartbeat that keeps up leaves every lease >= ttl - margin - interval of trust.
            sample["min_trust_left_s"] = trust_left()
        out.append(sample)
    return out


def _summary(name: str, note: str, n: int, samples: list[dict[str, float]]) -> dict[str, Any]:
    med = {k: round(statistics.median(s[k] for s in samples), 2) for k in samples[0]}
    return {"name": name, "note": note, "leases": n, **med, "runs": samples}


def run_lease(url: str, n: int, windows: int, log: Any) -> dict[str, Any]:
    store = connect(url)
    tag = uuid.uuid4().hex[:8]
    locks = [LeaseLock(store, f"bench-many-{tag}-{i}", ttl=TTL, on_lost="check") for i in range(n)]
    renewer = get_keeper() if keeps(store) else get_heartbeat()
    counter = SendCounter()
    base = renewer.renewals
    try:
        with counter.installed():
            leases = [lock.acquire(wait=0) for lock in locks]
            # Warm up past the first trust deadline of every lease: leases taken
            # one after another each check their first deadline on their own
            # (one scheduler wake-up each), after which the leases renewed in
            # one batch share their deadlines. That once-per-lease settling is
            # part of taking the leases, not of keeping them.
            log(f"many keys: {n} leases held; warming up for one ttl")
            time.sleep(TTL)
            # Windows of two intervals: renewals come in bursts (the leases were
            # taken in one), and a one-interval window could catch 0 or 2 of them.
            samples = _windows(windows, 2 * TTL / 3, lambda: renewer.renewals - base, counter,
                               lambda: min(lease.trusted_for() for lease in leases),
                               keeper=getattr(renewer, "pid", None))
            lost = sum(1 for lease in leases if lease.lost)
            for lock, lease in zip(locks, leases):
                lock.release(lease)
    finally:
        store.close()
    result = _summary("lease_integrations, keeper process" if keeps(store)
                      else "lease_integrations, 1 heartbeat thread", f"ttl {TTL:g} s, renew every "
                      f"{TTL / 3:g} s, {n} leases", n, samples)
    result["lost"] = lost
    return result


def run_prl(url: str, n: int, windows: int, log: Any) -> dict[str, Any]:
    import redis
    import redis_lock  # type: ignore[import-untyped]

    client = redis.Redis.from_url(url, max_connections=n + 8)
    tag = uuid.uuid4().hex[:8]
    # expire*2/3 = renewal interval; expire 3 s renews every 2 s, like the heartbeat above.
    locks = [redis_lock.Lock(client, f"bench-many-prl-{tag}-{i}", expire=3, auto_renewal=True)
             for i in range(n)]
    counter = SendCounter()
    renewals = [0]
    original = redis_lock.Lock.extend

    def counting_extend(self: Any, expire: Any = None) -> None:
        renewals[0] += 1
        original(self, expire)

    redis_lock.Lock.extend = counting_extend
    try:
        with counter.installed():
            for lock in locks:
                lock.acquire(blocking=False)
            log(f"many keys: {n} python-redis-lock locks held; warming up")
            time.sleep(2.0)
            samples = _windows(windows, 4.0, lambda: renewals[0], counter)
            for lock in locks:
                lock.release()
    finally:
        redis_lock.Lock.extend = original
        client.close()
    return _summary("python-redis-lock, thread per lock", f"expire 3 s, renew every 2 s, {n} locks",
                    n, samples)


def run(url: str, n: int, windows: int, log: Any, with_prl: bool = True) -> list[dict[str, Any]]:
    out = [run_lease(url, n, windows, log)]
    if with_prl:
        try:
            out.append(run_prl(url, n, windows, log))
        except Exception as exc:
            out.append({"name": "python-redis-lock, thread per lock",
                        "error": f"{type(exc).__name__}: {exc}"})
    return out
