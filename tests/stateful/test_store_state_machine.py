"""Stateful property tests: random sequences of store calls against a reference
model of the contract, on every store's real server (issue 26, item 2).

The conformance suite checks each rule with one hand-picked sequence; here
Hypothesis picks the sequences (acquire, renew, release, break with and
without a token, a recorded loss, waiting past an expiry, an acquire just
before the expiry the renewals set, an operator deleting the lease row) from three holders
with random short ttls, and the model says after every step what the store
must have answered:

- acquire grants iff the key is free (never granted, released, broken,
  deleted) or expired, judged against the expiry the last renewal set; the
  new token is above every token the key was ever granted, also after the
  row was deleted;
- renew succeeds iff secret and token are the current holder's and the lease
  has not expired, and never resurrects it;
- release succeeds iff secret and token are the current holder's (once the
  lease has expired, untaken, the contract allows either answer);
- a break with a token happens iff the record still carries that token and a
  holder; without one it always clears the holder;
- ``get`` shows the model's holder, token and state; ``history`` holds every
  grant, release, break and recorded loss, in order, and the public history
  checker (``lease_integrations.core.checker``) finds nothing wrong with it.

Time advances by really waiting: ttls of 0.5-1.5 s and a rule that sleeps past
the current lease's expiry. Expiry is judged on the store's clock, so the
model knows it only as a window (the call's start and end + ttl); within
``EPS`` of that window either answer is accepted, and the answer observed
narrows the model (a refused renewal means the lease has expired for good).

Each store runs ``MAX_EXAMPLES`` sequences of up to ``STEPS`` steps, with at
most ``SLEEP_BUDGET`` seconds of waiting per sequence: about 15-35 s per store
on a 2-core machine. The seed is printed (``LEASE_STATEFUL_SEED=N`` replays
it; ``LEASE_STATEFUL_EXAMPLES`` runs more sequences); a divergence fails at
the first wrong answer and Hypothesis prints the shrunk sequence of steps.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
import uuid
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from lease_integrations import LeaseStore, connect
from lease_integrations.core.checker import check_history
from lease_integrations.core.store import HISTORY_LIMIT

#: Seconds of uncertainty around an expiry: the store's clock against this
#: process's, plus scheduling on a loaded machine. Outcomes inside it are not judged.
EPS = 0.15
TTLS = (0.5, 0.8, 1.0, 1.5)
HOLDERS = ("h0", "h1", "h2")
#: Who calls renew or release: the current holder (most sequences worth running
#: involve it), or a named holder, current or not.
CALLERS = ("current", *HOLDERS)
MAX_EXAMPLES = int(os.environ.get("LEASE_STATEFUL_EXAMPLES", "20"))
STEPS = 14
SLEEP_BUDGET = 3.0  # seconds of waiting per sequence


@dataclass
class Grant:
    holder: str
    secret: str
    token: int
    # the store's expiry, as bounds on this process's monotonic clock
    exp_lo: float
    exp_hi: float
    ended: bool = False  # released or broken: the record has no holder
    expired_seen: bool = False  # the store said it expired: it stays expired

    def status(self, start: float, end: float) -> str:
        """"live", "expired" or "unsure" for a call made between start and end."""
        if self.expired_seen or start - EPS > self.exp_hi:
            return "expired"
        if end + EPS < self.exp_lo:
            return "live"
        return "unsure"


def secret_for(holder: str) -> str:
    return f"secret-{holder}-{uuid.uuid4().hex[:8]}"


class LeaseMachine(RuleBasedStateMachine):
    """One key per sequence; the model is ``grant`` (the newest grant),
    ``last_token``, what each holder got (``mine``) and the expected history."""

    store: LeaseStore  # set per store by the test below
    url: str
    runs: dict[str, int]  # sequences started and steps checked, for the printed line

    def __init__(self) -> None:
        super().__init__()
        self.deleted_at: int | None = None  # len(events) when the row was last deleted
        self.deleted_held: set[int] = set()  # tokens whose row was deleted while held
        self.key = f"stateful-{uuid.uuid4().hex[:12]}"
        self.grant: Grant | None = None
        self.last_token: int | None = None
        self.mine: dict[str, Grant] = {}
        self.events: list[tuple[str, int, str | None]] = []
        self.slept = 0.0
        self.min_ttl = max(TTLS)
        self.runs["examples"] += 1

    # -- helpers -------------------------------------------------------------------------
    def _caller(self, who: str) -> str:
        if who != "current":
            return who
        return self.grant.holder if self.grant is not None else HOLDERS[0]

    def _presented(self, holder: str, mode: str) -> tuple[str, int] | None:
        """(secret, token) a holder presents: its own latest grant, or the
        current token (which anyone can read) with its own secret."""
        own = self.mine.get(holder)
        if mode == "own":
            return None if own is None else (own.secret, own.token)
        if self.last_token is None:
            return None
        return (own.secret if own else secret_for(holder)), self.last_token

    def _is_owner(self, secret: str, token: int) -> bool:
        g = self.grant
        return g is not None and not g.ended and g.secret == secret and g.token == token

    # -- rules ---------------------------------------------------------------------------
    @initialize(holder=st.sampled_from(HOLDERS), ttl=st.sampled_from(TTLS))
    def first_grant(self, holder: str, ttl: float) -> None:
        """Every sequence starts held, so its steps act on a lease."""
        self.acquire(holder, ttl, late=False)

    @rule(holder=st.sampled_from(HOLDERS), ttl=st.sampled_from(TTLS), late=st.booleans())
    def acquire(self, holder: str, ttl: float, late: bool) -> None:
        """``late``: first wait until the current lease has expired."""
        self._wait(late)
        secret = secret_for(holder)
        start = time.monotonic()
        result = self.store.acquire(self.key, holder, secret, ttl, {"holder": holder})
        end = time.monotonic()
        g = self.grant
        status = "free" if g is None or g.ended else g.status(start, end)
        if status in ("free", "expired"):
            assert result.granted, f"acquire by {holder} refused on a {status} key: {result.record}"
        elif status == "live":
            assert not result.granted, f"acquire by {holder} granted while {g} was live"
        if not result.granted:
            assert g is not None and result.record is not None
            assert (result.record.holder, result.record.token) == (g.holder, g.token), \
                f"busy record {result.record} does not name the holder {g.holder} / {g.token}"
            g.exp_lo = max(g.exp_lo, start)  # it was live at some instant after start
            return
        record = result.record
        assert record is not None and record.holder == holder
        if self.last_token is not None:
            assert record.token > self.last_token, \
                f"token {record.token} granted after {self.last_token}: tokens must rise"
        assert record.token >= 1
        if status == "expired":
            self.runs["expired takeovers"] += 1
        self.grant = self.mine[holder] = Grant(holder, secret, record.token, start + ttl, end + ttl)
        self.last_token = record.token
        self.min_ttl = min(self.min_ttl, ttl)
        self.events.append(("acquired", record.token, holder))

    @rule(who=st.sampled_from(CALLERS), ttl=st.sampled_from(TTLS),
          mode=st.sampled_from(("own", "current-token")), late=st.booleans())
    def renew(self, who: str, ttl: float, mode: str, late: bool) -> None:
        self._wait(late)
        holder = self._caller(who)
        presented = self._presented(holder, mode)
        if presented is None:
            presented = (secret_for(holder), (self.last_token or 0) + 1)
        secret, token = presented
        start = time.monotonic()
        renewed = self.store.renew(self.key, secret, token, ttl)
        end = time.monotonic()
        if not self._is_owner(secret, token):
            assert not renewed, f"renew by {holder} ({mode}, token {token}) succeeded: not the owner"
            return
        g = self.grant
        assert g is not None
        status = g.status(start, end)
        if status == "live":
            assert renewed, f"renew by the owner {holder} of live token {token} refused"
        elif status == "expired":
            assert not renewed, f"renew of expired token {token} succeeded: a lost lease resurrected"
        if renewed:
            g.exp_lo, g.exp_hi = start + ttl, end + ttl
            self.min_ttl = min(self.min_ttl, ttl)
        else:
            g.expired_seen = True
            self.runs["expired renewals refused"] += 1

    @rule(who=st.sampled_from(CALLERS), mode=st.sampled_from(("own", "current-token")))
    def release(self, who: str, mode: str) -> None:
        holder = self._caller(who)
        presented = self._presented(holder, mode)
        if presented is None:
            presented = (secret_for(holder), (self.last_token or 0) + 1)
        secret, token = presented
        start = time.monotonic()
        released = self.store.release(self.key, secret, token)
        end = time.monotonic()
        if not self._is_owner(secret, token):
            assert not released, f"release by {holder} ({mode}, token {token}) succeeded: not the owner"
            return
        g = self.grant
        assert g is not None
        if g.status(start, end) == "live":
            assert released, f"release by the owner {holder} of live token {token} refused"
        if released:
            g.ended = True
            self.events.append(("released", token, holder))
        else:  # allowed once expired (untaken): the lease stays expired
            g.expired_seen = True

    @rule(mode=st.sampled_from(("any", "current", "stale")), late=st.booleans())
    def force_release(self, mode: str, late: bool) -> None:
        self._wait(late)
        token: int | None = None
        if mode == "current":
            token = self.last_token if self.last_token is not None else 1
        elif mode == "stale":
            token = max(1, (self.last_token or 1) - 1) if self.last_token != 1 else 99
        before = self.store.force_release(self.key, by="stateful-ops", token=token)
        g = self.grant
        if self.last_token is None or g is None:
            assert before is None, f"break of a key never granted returned {before}"
            return
        holder = None if g.ended else g.holder
        should_break = token is None or (token == g.token and not g.ended)
        if not should_break:
            assert before is None, f"break on token {token} happened; the record is {g}"
            return
        assert before is not None, f"break ({mode}, token {token}) did nothing; the record is {g}"
        assert (before.holder, before.token) == (holder, g.token), f"break returned {before}"
        g.ended = True
        self.events.append(("broken", g.token, holder))

    @rule(holder=st.sampled_from(HOLDERS), ttl=st.sampled_from(TTLS),
          ahead=st.sampled_from((0.2, 0.3)))
    def acquire_just_before_expiry(self, holder: str, ttl: float, ahead: float) -> None:
        """Wait until ``ahead`` s before the expiry the last grant or renewal
        set, then acquire: a store that expires leases early grants here."""
        g = self.grant
        if g is not None and not g.ended and not g.expired_seen:
            self._sleep(g.exp_lo - ahead - time.monotonic())
        self.acquire(holder, ttl, late=False)

    @rule()
    def delete_row(self) -> None:
        """An operator's cleanup: the key's lease row (document, hash) is
        deleted, held or not. The key is free; its tokens must keep rising."""
        if self.last_token is None:
            return
        delete_lease_row(self.store, self.url, self.key)
        if self.grant is not None and not self.grant.ended:
            self.deleted_held.add(self.grant.token)
        self.grant = None
        self.mine.clear()  # nothing anyone holds is the store's any more
        self.deleted_at = len(self.events)
        self.runs["rows deleted"] += 1

    @rule(holder=st.sampled_from(HOLDERS))
    def record_loss(self, holder: str) -> None:
        own = self.mine.get(holder)
        if own is None or self.grant is None:
            return
        self.store.record_event(self.key, "lost", holder, own.token, {"reason": "stateful test"})
        self.events.append(("lost", own.token, holder))

    @rule(seconds=st.sampled_from((0.1, 0.3, 0.6)))
    def wait(self, seconds: float) -> None:
        """Let store time pass a little (it may reach an expiry boundary)."""
        self._sleep(seconds)

    def _wait(self, past_expiry: bool) -> None:
        """Before a rule: wait until the current lease has surely expired."""
        g = self.grant
        if past_expiry and g is not None and not g.ended and not g.expired_seen:
            self._sleep(g.exp_hi + EPS + 0.05 - time.monotonic())

    def _sleep(self, seconds: float) -> None:
        seconds = max(0.0, min(seconds, SLEEP_BUDGET - self.slept))  # bounded per sequence
        self.slept += seconds
        time.sleep(seconds)

    # -- invariants ---------------------------------------------------------------------
    @invariant()
    def record_matches_the_model(self) -> None:
        self.runs["checks"] += 1
        start = time.monotonic()
        record = self.store.get(self.key)
        end = time.monotonic()
        g = self.grant
        if self.last_token is None or g is None:
            assert record is None, f"a key never granted has a record: {record}"
            return
        assert record is not None, "the record of a granted key is gone"
        assert record.token == self.last_token, f"record token {record.token}, granted {self.last_token}"
        if g.ended:
            assert record.holder is None and record.state == "released", record
            return
        assert record.holder == g.holder, f"record holder {record.holder}, model {g.holder}"
        status = g.status(start, end)
        if status == "live":
            assert record.state == "held", f"{record.state} record of a live lease: {record}"
        elif status == "expired":
            assert record.state == "expired", f"{record.state} record of an expired lease: {record}"

    @invariant()
    def history_is_complete_and_ordered(self) -> None:
        if not self.events:
            return
        history = self.store.history(self.key, HISTORY_LIMIT)
        seen = [(e.kind, e.token, e.holder) for e in history]
        # a store that keeps history in the lease's own record (MongoDB) loses it with the row
        kept = [self.events] if self.deleted_at is None else \
            [self.events, self.events[self.deleted_at:]]
        assert seen in kept, f"history {seen}\n   model {self.events}"
        assert all(e.key == self.key for e in history)
        report = check_history(history, ttl=self.min_ttl, drift=EPS, key=self.key)
        # a row deleted while held ends its lease, and no history records that
        unexplained = [v for v in report.violations
                       if not (v.rule == "early-grant" and v.tokens[0] in self.deleted_held)]
        assert not unexplained, str(report)


def delete_lease_row(store: LeaseStore, url: str, key: str) -> None:
    """Delete one key's lease record behind the store's back, as an operator would."""
    kind = store.url.split(":")[0]
    if kind == "memory":
        with store._cond:  # type: ignore[attr-defined]
            store._rows.pop(key, None)  # type: ignore[attr-defined]
    elif kind == "sqlite":
        with sqlite3.connect(store.path) as db:  # type: ignore[attr-defined]
            db.execute("DELETE FROM leases WHERE key = ?", (key,))
    elif kind.startswith("redis"):
        store._client.delete(f"{{{store.prefix}:{key}}}:rec")  # type: ignore[attr-defined]
    elif kind.startswith("postgres"):
        import psycopg
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(f"DELETE FROM {store.table} WHERE key = %s", (key,))  # type: ignore[attr-defined]
    elif kind.startswith("mongo"):
        store._collection().delete_one({"_id": key})  # type: ignore[attr-defined]
    elif kind == "s3":
        store._bucket.delete(store._name(key))  # type: ignore[attr-defined]
    else:
        raise AssertionError(f"no way to delete a lease row of {store.url}")


def _seed() -> int:
    given = os.environ.get("LEASE_STATEFUL_SEED")
    return int(given) if given else random.SystemRandom().randrange(2**32)


@pytest.mark.slow
def test_random_sequences_follow_the_contract(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    store = connect(store_url)
    chosen = _seed()
    kind = store_url.split(":")[0]
    runs = {"examples": 0, "checks": 0, "expired takeovers": 0, "expired renewals refused": 0,
            "rows deleted": 0}

    class Machine(LeaseMachine):
        pass

    Machine.store, Machine.url, Machine.runs = store, store_url, runs
    seed(chosen)(Machine)
    started = time.monotonic()
    try:
        run_state_machine_as_test(Machine, settings=settings(
            max_examples=MAX_EXAMPLES, stateful_step_count=STEPS, deadline=None, database=None,
            print_blob=True, phases=(Phase.explicit, Phase.generate, Phase.shrink),
            suppress_health_check=list(HealthCheck)))
    except BaseException as exc:
        exc.add_note(f"stateful [{kind}]: seed {chosen}; replay with LEASE_STATEFUL_SEED={chosen}")
        raise
    finally:
        store.close()
        with capsys.disabled():
            print(f"\nstateful [{kind}]: seed {chosen}, {runs['examples']} sequences, "
                  f"{runs['checks']} steps checked ({runs['expired takeovers']} takeovers after expiry, "
                  f"{runs['expired renewals refused']} renewals refused after expiry, "
                  f"{runs['rows deleted']} rows deleted), "
                  f"{time.monotonic() - started:.1f} s")
