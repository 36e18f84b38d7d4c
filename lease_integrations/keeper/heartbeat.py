"""One heartbeat per process renews every lease the process holds.

A single scheduler thread keeps a heap of due times and trust deadlines; the
renewals themselves run on a small worker pool, so a renewal stuck in a slow
network call never delays another lease's renewal nor the moment a lease is
declared lost (its trust deadline is watched by the scheduler, not by the call).

A heap item is a group of leases, not one: the leases one batch renewed are
due again, and trusted until, the same instant, so they are queued as one
renewal and one deadline. A process keeping a thousand leases then handles a
few items per interval instead of two thousand (most of its CPU went there).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from ..core.clock import now
from ..core.errors import StoreUnavailable
from ..core.lease import Lease
from ..core.store import LeaseStore, end_of_token
from . import kernel
from .bounded import bounded
from .containment import DeathPipes

log = logging.getLogger("lease_integrations")

REFUSED = "the store refused the renewal"
#: Events read to explain a refusal: a supersede adds its own event and the
#: new holder's grant after the break.
EXPLAIN_DEPTH = 10
#: Renewal workers shared by every lease; bounded so 1,000 leases do not mean
#: 1,000 threads, and more than one so one hung call does not stall the rest.
RENEW_WORKERS = 4
#: Renewals of one store due within this long of each other (and within a
#: tenth of their interval) go out as one ``renew_many`` call: renewed a few
#: milliseconds early, they cost one round trip per batch instead of per lease.
BATCH_WINDOW = 0.05
#: Leases per batch at most, so one slow batch never holds back every lease.
BATCH_MAX = 1000


@dataclass(eq=False)
class _Entry:
    lease: Lease
    store: LeaseStore
    interval: float
    retry_delay: float
    #: When the renewal in flight was handed to the pool (0.0: none), so a
    #: closed window can say whether a call was slow or never started.
    in_flight: float = 0.0
    active: bool = True
    failures: int = 0
    last_error: str = ""


class Heartbeat:
    """Renews registered leases every ``interval`` and retries failures until
    their trust window closes; reports refused renewals and closed windows as
    losses on the lease."""

    def __init__(self) -> None:
        # ``with self._lock`` where no wait is involved: a Condition's own
        # ``__enter__``/``__exit__`` are Python calls on every add and remove.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, str, list[_Entry]]] = []
        self._seq = itertools.count()
        self._entries: dict[int, _Entry] = {}
        self._thread: threading.Thread | None = None
        # When the scheduler will look at the heap next: -inf while it runs
        # (it looks before sleeping), else the end of its sleep. ``add``
        # wakes it only for work due before then: a cycle of acquire and
        # release then costs no thread switch.
        self._wake_at = float("-inf")
        self._pool: ThreadPoolExecutor | None = None
        #: Leases a fail-stop block runs under (``armed``), by id: while
        #: there is one, this process's own death pipe is armed, so that its
        #: death (the OOM killer), closed descriptors or ``exec`` end its
        #: group, children included (and groups below it: ``containment``),
        #: before the lease can expire. Made on the first; never in a keeper
        #: (it arms none of its own).
        self._armed: set[int] = set()
        self._death: DeathPipes | None = None
        #: Called with the leases one batch renewed and the instant its call
        #: started, after each lease's own ``renewed``: the keeper tells its
        #: job once per batch, not once per lease.
        self.on_renewed: Callable[[list[Lease], float], None] | None = None
        self.renewals = 0  # counters for benchmarks and the CLI
        self.renew_failures = 0

    # -- registration -------------------------------------------------------
    def add(self, lease: Lease, store: LeaseStore, interval: float, *, armed: bool = False,
            due: float | None = None) -> None:
        """Renew ``lease`` every ``interval``, first at ``due`` (default: one
        interval from now). ``armed``: a fail-stop block runs under it."""
        entry = _Entry(lease, store, interval, retry_delay=max(0.02, min(interval / 4, 1.0)))
        with self._lock:
            if armed:
                self._arm(id(lease))
            self._entries[id(lease)] = entry
            due = now() + interval if due is None else due
            self._push(due, "renew", [entry])
            self._push(lease.trusted_until, "deadline", [entry])
            self._ensure_started()
            if min(due, lease.trusted_until) < self._wake_at:
                self._cond.notify()  # only when the scheduler must wake sooner

    def remove(self, lease: Lease) -> None:
        """Stop renewing ``lease``. Does not wait for a renewal in flight: one
        that reaches the store after the release finds no matching holder and
        fails harmlessly, so a release (on SIGTERM, say) is never delayed."""
        with self._lock:
            if id(lease) in self._armed:
                self._armed.discard(id(lease))
                if not self._armed and self._death is not None:
                    self._death.arm(False)
            entry = self._entries.pop(id(lease), None)
            if entry is not None:
                entry.active = False
            # Entries of released leases stay in the heap until due; drop them
            # in bulk before they outnumber the live ones (bounded memory).
            if len(self._heap) > 4 * len(self._entries) + 64:
                self._heap = [item for item in self._heap if any(e.active for e in item[3])]
                heapq.heapify(self._heap)

    def _arm(self, lid: int) -> None:
        """(``_lock`` held.)"""
        if not self._armed:
            pipes = self._death_pipes()
            if pipes is not None:
                pipes.arm(True)
        self._armed.add(lid)

    def _death_pipes(self) -> DeathPipes | None:
        """This process's death pipe, made on first use. A kernel without
        the tools (not Linux) has none: the ladder alone stops the job there."""
        if self._death is None and kernel.available():
            try:
                self._death = DeathPipes.own()
            except OSError as exc:  # out of descriptors: the ladder still stands
                log.warning("no death pipe for this process (%s): its children are not "
                            "ended by the kernel if it dies while it holds a lease", exc)
        return self._death

    @contextmanager
    def contain(self, group: int) -> Iterator[None]:
        """While the block runs, this process's death pipe kills process
        group ``group`` too, from its start (a look would find it within a
        tick): ``leasectl run`` starts its command in a session of its own."""
        with self._lock:
            pipes = self._death_pipes()
            if pipes is not None:
                pipes.add_owner(-group)
        try:
            yield
        finally:
            if pipes is not None:
                pipes.drop_owner(-group)

    def disarm_for_exit(self) -> None:
        """See ``DeathPipes.disarm_for_exit``. No lock: a thread of the
        job may hold it, stuck."""
        if self._death is not None:
            self._death.disarm_for_exit()

    def held(self) -> list[tuple[Lease, LeaseStore]]:
        """Every lease being renewed, with its store (for fail-stop's release)."""
        with self._cond:
            return [(entry.lease, entry.store) for entry in self._entries.values()]

    def __len__(self) -> int:
        with self._cond:
            return len(self._entries)

    def __contains__(self, lease: object) -> bool:
        with self._cond:
            return id(lease) in self._entries

    # -- scheduler ------------------------------------------------------------
    def _push(self, when: float, kind: str, entries: list[_Entry]) -> None:
        heapq.heappush(self._heap, (when, next(self._seq), kind, entries))

    def _push_by(self, kind: str, entries: list[_Entry], when: Callable[[_Entry], float]) -> None:
        """Queue ``entries`` for ``kind``, one item per distinct ``when``
        (leases renewed together share it: one item for the batch)."""
        groups: dict[float, list[_Entry]] = {}
        for entry in entries:
            groups.setdefault(when(entry), []).append(entry)
        for at, group in groups.items():
            self._push(at, kind, group)

    def _ensure_started(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._pool = ThreadPoolExecutor(RENEW_WORKERS, thread_name_prefix="lease-renew")
            self._thread = threading.Thread(target=self._run, name="lease-heartbeat", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._heap:
                        self._wake_at = float("inf")
                        self._cond.wait()
                        self._wake_at = float("-inf")
                        continue
                    when, _, kind, group = self._heap[0]
                    delay = when - now()
                    if delay > 0:
                        self._wake_at = when
                        self._cond.wait(delay)
                        self._wake_at = float("-inf")
                        continue
                    heapq.heappop(self._heap)
                    group = [entry for entry in group if entry.active]
                    if group:
                        batch = (self._due_with(group) if kind == "renew"
                                 else self._past_deadline(group))
                        break
            try:
                if kind == "deadline":
                    for one in batch:
                        self._lose_at_deadline(one)
                else:
                    self._start_renewal(batch)
            except BaseException:  # never stop serving the other leases
                for one in batch:
                    self._failed(one, kind)

    def _due_with(self, group: list[_Entry]) -> list[_Entry]:
        """``group`` and every other renewal of the same store due within
        ``BATCH_WINDOW`` (at most ``BATCH_MAX``): one ``renew_many`` call, one
        round trip, instead of one per lease. Leases taken together fall due
        together, so a process holding many leases renews them in a few calls
        per interval. Called with the condition held; other items popped on
        the way are put back as they were."""
        first = group[0]
        if not first.store.batch_renewals:
            return group  # no batch form: parallel single renewals on the pool are faster
        batch, seen = group, {id(entry) for entry in group}
        horizon = now() + min(BATCH_WINDOW, first.interval / 10)
        aside: list[tuple[float, int, str, list[_Entry]]] = []
        while self._heap and len(batch) < BATCH_MAX and self._heap[0][0] <= horizon:
            item = heapq.heappop(self._heap)
            if (item[2] != "renew" or item[3][0].store is not first.store
                    or len(batch) + len(item[3]) > BATCH_MAX):
                aside.append(item)
                continue
            for entry in item[3]:
                if entry.active and id(entry) not in seen:
                    batch.append(entry)
                    seen.add(id(entry))
        for item in aside:
            heapq.heappush(self._heap, item)
        return batch

    def _failed(self, entry: _Entry, kind: str) -> None:
        """A bug or a broken callback in one lease's step: log it and try that
        step again shortly, so its renewals and its deadline still happen."""
        log.exception("lease heartbeat: %s of lease %s failed; retrying", kind, entry.lease.key)
        with self._cond:
            entry.in_flight = 0.0
            if entry.active:
                self._push(now() + entry.retry_delay, kind, [entry])
                self._cond.notify()

    def _past_deadline(self, group: list[_Entry]) -> list[_Entry]:
        """``group`` and every other trust deadline due now, in one pass under
        the condition: a lease renewed since its deadline was queued gets the
        new one queued (with the others renewed in its batch); the leases
        whose window has closed are returned, to be lost."""
        at = now()
        closed, trusted = [], []
        while True:
            for entry in group:
                if not entry.active:
                    continue
                if at < entry.lease.trusted_until:
                    trusted.append(entry)
                else:
                    entry.active = False
                    self._entries.pop(id(entry.lease), None)
                    closed.append(entry)
            if not (self._heap and self._heap[0][2] == "deadline" and self._heap[0][0] <= at):
                break
            group = heapq.heappop(self._heap)[3]
        self._push_by("deadline", trusted, lambda entry: entry.lease.trusted_until)
        return closed

    def _lose_at_deadline(self, entry: _Entry) -> None:
        if entry.last_error:
            why = entry.last_error
        elif entry.in_flight:  # a slow store, every worker busy, or started late (a pause)
            why = f"a renewal had been in flight for {now() - entry.in_flight:.2f} s"
        else:  # due well before the deadline: the process was starved or paused
            why = "no renewal was in flight"
        self._report_lost(entry, f"no successful renewal within the trust window ({why})")

    def _start_renewal(self, batch: list[_Entry]) -> None:
        with self._cond:
            ready = [e for e in batch if not e.in_flight and e.active]
            at = now()
            for e in ready:
                e.in_flight = at
        if not ready:
            return
        # A store without a batch form renews each lease in a call of its own.
        for calls in [ready] if ready[0].store.batch_renewals else [[e] for e in ready]:
            if self._submit(self._renew, calls) is None:
                with self._cond:
                    for e in calls:
                        e.in_flight = 0.0

    def _renew(self, batch: list[_Entry]) -> None:
        try:
            self._renew_batch(batch)
        except BaseException:
            for entry in batch:
                self._failed(entry, "renew")

    def _renew_batch(self, batch: list[_Entry]) -> None:
        """One store call for the batch; then each lease settled on its own:
        a refused renewal loses only that lease, an error for the call (or
        None, no verdict, for one lease) is a transient failure of each lease
        concerned (retried until its own trust window closes)."""
        started = now()
        outcomes: list[bool | None]
        try:
            if len(batch) == 1:
                lease = batch[0].lease
                outcomes = [batch[0].store.renew(lease.key, lease.secret, lease.token, lease.ttl)]
            else:
                outcomes = list(batch[0].store.renew_many(
                    [(e.lease.key, e.lease.secret, e.lease.token, e.lease.ttl) for e in batch]))
                if len(outcomes) != len(batch):
                    raise RuntimeError(f"renew_many answered {len(outcomes)} of {len(batch)}")
        except Exception as exc:  # transient: retry until the trust window closes
            error = f"{type(exc).__name__}: {exc}"
            for entry in batch:
                self._settle(entry, None, error, exc)
            return
        renewed = [e for e, ok in zip(batch, outcomes) if ok]
        kept: list[_Entry] = []
        if renewed:  # the common case, settled under one lock for the whole batch
            with self._cond:
                for entry in renewed:
                    entry.in_flight = 0.0
                    if entry.active:
                        entry.failures = 0
                        entry.last_error = ""
                        entry.lease.renewed(started)
                        kept.append(entry)
                self.renewals += len(kept)
                self._push_by("renew", kept, lambda entry: started + entry.interval)
                self._cond.notify()
        if kept and self.on_renewed is not None:
            self.on_renewed([entry.lease for entry in kept], started)
        for entry, outcome in zip(batch, outcomes):
            if outcome is None:  # no verdict for this lease alone (a Cluster node failed)
                why = StoreUnavailable("the store gave no verdict for this renewal",
                                       url=entry.store.url)
                self._settle(entry, None, f"StoreUnavailable: {why}", why)
            elif not outcome:
                self._settle(entry, False, "", None)

    def _settle(self, entry: _Entry, outcome: bool | None, error: str,
                exc: Exception | None) -> None:
        """A renewal that failed (None: retry it) or was refused (False: lost);
        successes are settled in bulk by ``_renew_batch``."""
        lease = entry.lease
        if exc is not None:
            entry.last_error = error
            self.renew_failures += 1
            lease.renew_failed(error, type(exc).__name__)
        with self._cond:
            entry.in_flight = 0.0
            if not entry.active:
                return
            if outcome is None:
                entry.failures += 1
                jitter = random.uniform(0.5, 1.0)
                self._push(now() + entry.retry_delay * jitter, "renew", [entry])
            else:
                entry.active = False
                self._entries.pop(id(lease), None)
            self._cond.notify()
        if outcome is False:
            self._report_lost(entry, _why_refused(entry.store, lease))

    def _submit(self, fn: Callable[..., None], *args: object) -> Future[None] | None:
        """Hand work to the renewal pool; None once the interpreter is
        shutting down (the process is exiting: nothing left to protect)."""
        if self._pool is None:
            return None
        try:
            return self._pool.submit(fn, *args)
        except RuntimeError:
            return None

    def _report_lost(self, entry: _Entry, reason: str) -> None:
        lease = entry.lease
        # Recorded off the scheduler thread (the store may be why we lost it),
        # and queued before the callbacks, which may end the process (fail-stop).
        lease.mark_lost(reason, before_callbacks=lambda: self._submit(
            _record_loss, entry.store, lease, reason))


def _why_refused(store: LeaseStore, lease: Lease) -> str:
    """What the store recorded about a refused renewal (``broken by
    supersede by host:pid``), read in a bounded time: the job, its logs and
    its face (a failed Airflow try, a cancelled Prefect run) say who stopped
    it, whichever renewer (the keeper's, or the job's own) met the refusal."""
    found: list[str] = []

    def read() -> None:
        end = end_of_token(store.history(lease.key, limit=EXPLAIN_DEPTH), lease.token)
        if end is not None and end.kind == "broken":
            found.append(f"{REFUSED}: the lease was broken by {end.detail.get('by', '?')}")

    bounded(read, now() + min(1.0, lease.margin / 4), "reading why the store refused")
    return found[0] if found else f"{REFUSED}: the lease expired or was taken over or broken"


def _record_loss(store: LeaseStore, lease: Lease, reason: str) -> None:
    """Best effort: let the key's history show that the holder noticed."""
    try:
        store.record_event(lease.key, "lost", lease.holder, lease.token, {"reason": reason})
    except Exception:
        log.debug("could not record the loss of %s", lease.key, exc_info=True)


_lock = threading.Lock()
_instance: Heartbeat | None = None


def get_heartbeat() -> Heartbeat:
    """The process's heartbeat, started on first use."""
    global _instance
    instance = _instance
    if instance is not None:  # every call after the first: no lock
        return instance
    with _lock:
        if _instance is None:
            _instance = Heartbeat()
        return _instance


def after_fork() -> None:
    """A forked child has none of the parent's threads: a fresh heartbeat,
    not one whose scheduler thread does not exist."""
    global _instance, _lock
    if _instance is not None and _instance._death is not None:
        _instance._death.close()  # the parent's: the child must not hold its writer open
    _instance = None
    _lock = threading.Lock()
