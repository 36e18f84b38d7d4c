"""Seeded loss-injection torture of hold(): run as a child process by
test_loss_torture.py (so a process death shows as an exit code).

Runners (the main thread, worker threads, and asyncio tasks on a loop in a
worker thread) hold leases one after another, some nested, with bodies of
random length; a breaker connection breaks them at random moments: as the
body starts, during it, as its last step, or while the thread is inside a
store release. The store's answer to the break decides what is checked: when
``force_release`` found the block's lease still held, the block must not
return normally. After every block: no lease of it still held in the store,
none on the heartbeat, and unrelated work on the same thread runs to its end.

    python -m tests.core.loss_torture URL --seed N --blocks B --seconds S

It stops after B blocks, or after S seconds on a host too slow to get there.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import faulthandler
import random
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

from lease_integrations import Lease, LeaseLock, LeaseLost, LeaseStore, connect
from lease_integrations.core.heartbeat import get_heartbeat
from tests.core.loss_support import releasing, renewing

MODES = ("none", "none", "first", "during", "end", "release")
ENDINGS = ("returned", "lost-at-exit", "lost-interrupted-in-body")


@dataclass
class Rec:
    """One block's lease and what the breaker found when it broke it."""

    lease: Lease
    thread: int
    broken_held: bool = False
    done: threading.Event = field(default_factory=threading.Event)


class Torture:
    def __init__(self, url: str, seed: int, seconds: float, blocks: int) -> None:
        self.url, self.seed = url, seed
        self.until = time.monotonic() + seconds
        self.blocks = blocks
        self.store = connect(url)
        self.releasing = releasing(self.store)
        self.counts: collections.Counter[str] = collections.Counter()
        self.failures: list[str] = []
        self.mutex = threading.Lock()

    # -- bookkeeping -------------------------------------------------------------
    def running(self) -> bool:
        """Until enough blocks ended, so a loaded host runs as many (only
        slower) as a quiet one; the time limit only bounds a crawling host."""
        with self.mutex:
            ended = sum(self.counts[k] for k in ENDINGS)
        return ended < self.blocks and time.monotonic() < self.until

    def count(self, what: str) -> None:
        with self.mutex:
            self.counts[what] += 1

    def fail(self, what: str) -> None:
        with self.mutex:
            self.failures.append(what)

    def lock(self, name: str) -> LeaseLock:
        return LeaseLock(self.store, name, ttl=0.5)

    def break_now(self, breaker: LeaseStore, rec: Rec) -> None:
        before = breaker.force_release(rec.lease.key, by="torture")
        rec.broken_held = before is not None and before.holder is not None \
            and before.token == rec.lease.token and before.held
        self.count("break-found-it-held" if rec.broken_held else "break-found-it-gone")
        rec.done.set()

    def scheduled_break(self, breaker: LeaseStore, rec: Rec, mode: str, delay: float) -> None:
        if mode == "release":  # wait (bounded) until the thread releases a lease
            deadline = time.monotonic() + 0.3
            while rec.thread not in self.releasing and time.monotonic() < deadline:
                time.sleep(0.0001)
            self.count("break-inside-release" if rec.thread in self.releasing else
                       "break-meant-for-release-came-late")
        else:
            time.sleep(delay)  # fault injection at a random moment, not synchronisation
        self.break_now(breaker, rec)

    def check_after(self, recs: list[Rec], returned: bool) -> None:
        for rec in recs:
            if not rec.done.wait(30):  # generous: a loaded CI host
                faulthandler.dump_traceback()  # where the breaker is stuck
                self.fail(f"break of {rec.lease.key} never finished")
            if rec.broken_held and returned:
                self.fail(f"{rec.lease.key}: broken while held, yet the block returned normally")
            record = self.store.get(rec.lease.key)
            if record is not None and record.held and record.token == rec.lease.token:
                self.fail(f"{rec.lease.key}: still held in the store after its block")
            if renewing(get_heartbeat(), rec.lease):
                self.fail(f"{rec.lease.key}: still on the heartbeat after its block")

    def unrelated_work(self, where: str) -> None:
        try:
            for _ in range(3):
                threading.Event().wait(0.0005)
        except BaseException as exc:
            self.fail(f"unrelated work on {where} interrupted: {exc!r}")

    # -- one sync iteration: nested holds on this thread --------------------------
    def sync_iteration(self, rng: random.Random, name: str, breaker: LeaseStore,
                       planner: Planner) -> None:
        depth = rng.choice((1, 1, 2))
        modes = [rng.choice(MODES) for _ in range(depth)]
        lengths = [rng.choice((0.0, 0.002, 0.01, rng.uniform(0, 0.25))) for _ in range(depth)]
        recs: list[Rec] = []
        finished: list[int] = []

        def body(level: int) -> None:
            with self.lock(f"{name}-{level}").hold() as lease:
                rec = Rec(lease, threading.get_ident())
                recs.append(rec)
                mode = modes[level]
                if mode == "first":
                    self.break_now(breaker, rec)
                elif mode in ("during", "release"):
                    planner.append((rec, mode, rng.uniform(0, lengths[level] + 0.05)))
                try:
                    if level + 1 < depth:
                        body(level + 1)
                    work(lengths[level])
                    finished.append(level)
                    if mode == "end":
                        self.break_now(breaker, rec)
                finally:
                    if mode in ("none", "end"):
                        rec.done.set()  # nothing (more) to break

        returned = False
        try:
            body(0)
            returned = True
            self.count("returned")
        except LeaseLost:
            self.count("lost-at-exit" if len(finished) == depth else "lost-interrupted-in-body")
        self.check_after(recs, returned)
        self.count(f"sync-depth-{depth}")

    # -- one async iteration: hold_async, or a sync hold around an await ------------
    async def async_iteration(self, rng: random.Random, name: str, breaker: LeaseStore,
                              planner: Planner) -> None:
        mode = rng.choice(("none", "first", "during", "end"))
        length = rng.choice((0.0, 0.002, 0.01, rng.uniform(0, 0.25)))
        sync_hold = rng.random() < 0.4
        recs: list[Rec] = []
        finished: list[bool] = []

        async def body(lease: Lease) -> None:
            rec = Rec(lease, threading.get_ident())
            recs.append(rec)
            if mode == "first":
                self.break_now(breaker, rec)
            elif mode == "during":
                planner.append((rec, mode, rng.uniform(0, length + 0.05)))
            try:
                await asyncio.sleep(length)
                finished.append(True)
                if mode == "end":
                    self.break_now(breaker, rec)
            finally:
                if mode in ("none", "end"):
                    rec.done.set()  # nothing (more) to break

        returned = False
        try:
            if sync_hold:
                with self.lock(f"{name}-s").hold() as lease:
                    await body(lease)
            else:
                async with self.lock(f"{name}-a").hold_async() as lease:
                    await body(lease)
            returned = True
            self.count("returned")
        except LeaseLost:
            self.count("lost-at-exit" if finished else "lost-interrupted-in-body")
        await asyncio.to_thread(self.check_after, recs, returned)
        self.count("async-sync-hold" if sync_hold else "async-hold-async")


def work(seconds: float) -> None:
    """The body's work: short waits, so a worker thread's interrupt lands soon."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        threading.Event().wait(0.002)


def sync_runner(t: Torture, index: int, where: str) -> None:
    rng = random.Random(f"{t.seed}-{index}")
    breaker = connect(t.url)
    i = 0
    try:
        while t.running():
            planner = Planner(t, breaker)
            try:
                t.sync_iteration(rng, f"r{index}-{i}", breaker, planner)
            finally:
                planner.close()
            t.unrelated_work(where)
            i += 1
    except BaseException:
        t.fail(f"runner {where} died: {traceback.format_exc()}")
    finally:
        breaker.close()


class Planner:
    """A thread that runs the breaks one iteration schedules, as they come."""

    def __init__(self, t: Torture, breaker: LeaseStore) -> None:
        self.items: list[tuple[Rec, str, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(t, breaker),
                                       name="torture-breaker")
        self.thread.start()

    def append(self, item: tuple[Rec, str, float]) -> None:
        self.items.append(item)

    def _run(self, t: Torture, breaker: LeaseStore) -> None:
        seen = 0
        while seen < len(self.items) or not self.stop.is_set():
            if seen < len(self.items):
                t.scheduled_break(breaker, *self.items[seen])
                seen += 1
            else:
                self.stop.wait(0.001)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def async_runner(t: Torture, index: int) -> None:
    async def task(n: int, breaker: LeaseStore) -> None:
        rng = random.Random(f"{t.seed}-{index}-{n}")
        i = 0
        while t.running():
            planner = Planner(t, breaker)
            try:
                await t.async_iteration(rng, f"a{index}-{n}-{i}", breaker, planner)
            finally:
                await asyncio.to_thread(planner.close)
            i += 1

    async def ticker(stop: asyncio.Event) -> int:
        ticks = 0
        while not stop.is_set():
            await asyncio.sleep(0.001)
            ticks += 1
        return ticks

    async def main() -> None:
        breaker = connect(t.url)
        stop = asyncio.Event()
        unrelated = asyncio.create_task(ticker(stop))
        results = await asyncio.gather(*(task(n, breaker) for n in range(3)),
                                       return_exceptions=True)
        stop.set()
        try:
            t.count(f"ticker-ran-{min(1, await unrelated)}")
        except BaseException as exc:
            t.fail(f"the unrelated task on the loop was interrupted: {exc!r}")
        for result in results:
            if isinstance(result, BaseException):
                t.fail(f"an asyncio task died: {result!r}")
        breaker.close()

    try:
        asyncio.run(main())
    except BaseException:
        t.fail(f"the asyncio loop died: {traceback.format_exc()}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--blocks", type=int, default=1200)
    args = parser.parse_args()
    print(f"seed {args.seed} store {args.url.split(':')[0]}", flush=True)
    # A run that hangs prints every thread's stack every 20 s until the
    # parent's timeout kills it (successive dumps tell stuck from slow).
    faulthandler.enable()  # a crash prints every thread's stack too
    faulthandler.dump_traceback_later(args.seconds + 20, repeat=True)
    t = Torture(args.url, args.seed, args.seconds, args.blocks)
    threads = [threading.Thread(target=sync_runner, args=(t, n, f"worker-{n}"), name=f"w{n}")
               for n in (1, 2)]
    threads.append(threading.Thread(target=async_runner, args=(t, 3), name="loop"))
    for thread in threads:
        thread.start()
    sync_runner(t, 0, "main")
    for thread in threads:
        thread.join(60)
    deadline = time.monotonic() + 5
    while len(get_heartbeat()) and time.monotonic() < deadline:
        time.sleep(0.01)
    if len(get_heartbeat()):
        t.fail(f"{len(get_heartbeat())} heartbeat entries left")
    ours = [th.name for th in threading.enumerate() if th is not threading.main_thread()
            and not th.name.startswith(("lease-heartbeat", "lease-renew"))]
    if ours:
        t.fail(f"threads left: {ours}")
    t.store.close()
    print("counts", dict(sorted(t.counts.items())), flush=True)
    for failure in t.failures[:20]:
        print("FAILURE", failure, flush=True)
    return 1 if t.failures else 0


if __name__ == "__main__":
    sys.exit(main())
