"""The store-conformance suite: the executable spec of the store protocol.

Every store runs it unchanged (memory, SQLite, Redis, PostgreSQL, MongoDB-wire),
through the `store` fixture. Each rule of the store protocol (`lease_integrations/core/store.py`) is a test
here; a new store is done when this file passes for it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import break_race_worker
import pytest

from lease_integrations import LeaseBusy, LeaseLock, LeaseRecord, LeaseStore, connect
from lease_integrations.core.store import HISTORY_LIMIT, LeaseEvent

TTL = 30.0  # long enough that nothing expires by accident under load
SHORT_TTL = 0.6  # for the expiry rules: bounded polls wait it out


def until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Bounded poll: the store's clock decides expiry, so we ask the store."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def S(holder: str) -> str:
    """The owner secret a test uses for ``holder``: distinct from the public
    name, as LeaseLock's are."""
    return f"secret-of-{holder}-4f1c9e"


def grant(store: LeaseStore, key: str, holder: str, ttl: float = TTL,
          meta: dict[str, object] | None = None) -> LeaseRecord:
    result = store.acquire(key, holder, S(holder), ttl, meta or {})
    assert result.granted, f"expected {holder} to be granted {key}, store said {result.record}"
    assert result.record is not None
    return result.record


def expired(store: LeaseStore, key: str) -> bool:
    record = store.get(key)
    return record is not None and record.state == "expired"


# -- acquire --------------------------------------------------------------------

def test_first_acquire_grants_a_positive_token_with_store_times(
    store: LeaseStore, key: str
) -> None:
    record = grant(store, key, "alice")
    assert record.key == key
    assert record.holder == "alice"
    assert record.token >= 1
    assert record.state == "held"
    for stamp in (record.acquired_at, record.renewed_at, record.expires_at, record.observed_at):
        assert isinstance(stamp, datetime) and stamp.tzinfo is not None
    assert record.acquired_at is not None and record.expires_at is not None
    assert 25 < (record.expires_at - record.acquired_at).total_seconds() <= 30.5


def test_acquire_of_a_held_lease_is_busy_and_names_the_holder(store: LeaseStore, key: str) -> None:
    held = grant(store, key, "alice", meta={"dag_id": "billing"})
    result = store.acquire(key, "bob", S("bob"), TTL, {})
    assert not result.granted
    assert result.record is not None
    assert result.record.holder == "alice"
    assert result.record.token == held.token
    assert result.record.meta.get("dag_id") == "billing"
    expires_in = result.record.expires_in
    assert expires_in is not None and 0 < expires_in <= TTL + 0.01  # stores keep milliseconds
    current = store.get(key)
    assert current is not None and current.holder == "alice" and current.token == held.token


def test_same_holder_cannot_take_a_held_lease_twice(store: LeaseStore, key: str) -> None:
    grant(store, key, "alice")
    assert not store.acquire(key, "alice", S("alice"), TTL, {}).granted


def test_only_one_of_many_concurrent_acquires_wins(store: LeaseStore, key: str) -> None:
    start = threading.Barrier(12)
    winners: list[str] = []
    errors: list[BaseException] = []

    def contend(name: str) -> None:
        try:
            start.wait(timeout=10)
            if store.acquire(key, name, S(name), TTL, {}).granted:
                winners.append(name)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=contend, args=(f"w{i}",)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert len(winners) == 1, winners
    record = store.get(key)
    assert record is not None and record.holder == winners[0] and record.token >= 1


# -- tokens -----------------------------------------------------------------------

def test_token_increments_after_release(store: LeaseStore, key: str) -> None:
    first = grant(store, key, "alice")
    assert store.release(key, S("alice"), first.token)
    second = grant(store, key, "bob")
    assert second.token > first.token


def test_token_increments_after_expiry_takeover(store: LeaseStore, key: str) -> None:
    first = grant(store, key, "alice", ttl=SHORT_TTL)
    assert not store.acquire(key, "bob", S("bob"), TTL, {}).granted
    until(lambda: store.acquire(key, "bob", S("bob"), TTL, {}).granted, what="expiry by the store's clock")
    record = store.get(key)
    assert record is not None and record.holder == "bob" and record.token > first.token


def test_token_increments_after_force_release(store: LeaseStore, key: str) -> None:
    first = grant(store, key, "alice")
    store.force_release(key, by="operator")
    assert grant(store, key, "bob").token > first.token


def test_tokens_never_repeat_across_release_expiry_and_break(store: LeaseStore, key: str) -> None:
    seen: list[int] = []
    for round_ in range(3):
        rec = grant(store, key, f"r{round_}")
        seen.append(rec.token)
        assert store.release(key, S(f"r{round_}"), rec.token)
        rec = grant(store, key, f"b{round_}")
        seen.append(rec.token)
        store.force_release(key, by="test")
    rec = grant(store, key, "short", ttl=SHORT_TTL)
    seen.append(rec.token)
    until(lambda: expired(store, key), what="expiry")
    seen.append(grant(store, key, "last").token)
    assert seen == sorted(set(seen)), f"tokens must strictly increase: {seen}"


def test_tokens_are_per_key(store: LeaseStore, key: str) -> None:
    a = grant(store, key + "-a", "alice")
    grant(store, key + "-b", "bob")
    store.release(key + "-a", S("alice"), a.token)
    assert grant(store, key + "-a", "carol").token > a.token
    assert grant(store, key + "-c", "dave").token >= 1


# -- renew ------------------------------------------------------------------------

def test_renew_by_the_holder_extends_the_lease(store: LeaseStore, key: str) -> None:
    first = grant(store, key, "alice", ttl=5.0)
    assert store.renew(key, S("alice"), first.token, TTL)
    record = store.get(key)
    assert record is not None and record.holder == "alice" and record.token == first.token
    assert record.expires_at is not None and first.expires_at is not None
    assert record.expires_at > first.expires_at
    assert record.renewed_at is not None and first.renewed_at is not None
    assert record.renewed_at >= first.renewed_at


def test_renew_keeps_a_short_lease_alive_past_its_first_ttl(store: LeaseStore, key: str) -> None:
    rec = grant(store, key, "alice", ttl=1.0)
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        assert store.renew(key, S("alice"), rec.token, 1.0)
        time.sleep(0.2)
    assert not store.acquire(key, "bob", S("bob"), TTL, {}).granted


def test_renew_with_wrong_holder_or_token_fails(store: LeaseStore, key: str) -> None:
    rec = grant(store, key, "alice")
    assert not store.renew(key, S("mallory"), rec.token, TTL)
    assert not store.renew(key, S("alice"), rec.token + 1, TTL)
    assert not store.renew(key, S("alice"), rec.token - 1, TTL)
    assert not store.renew(key + "-other", S("alice"), rec.token, TTL)
    assert store.get(key + "-other") is None


def test_renew_after_expiry_fails_and_never_resurrects(store: LeaseStore, key: str) -> None:
    rec = grant(store, key, "alice", ttl=SHORT_TTL)
    until(lambda: expired(store, key), what="expiry")
    assert not store.renew(key, S("alice"), rec.token, TTL)
    record = store.get(key)
    assert record is not None and record.state != "held"
    taken = grant(store, key, "bob")
    assert taken.token > rec.token


def test_renew_after_release_or_break_fails(store: LeaseStore, key: str) -> None:
    rec = grant(store, key, "alice")
    assert store.release(key, S("alice"), rec.token)
    assert not store.renew(key, S("alice"), rec.token, TTL)
    rec2 = grant(store, key, "bob")
    store.force_release(key, by="operator")
    assert not store.renew(key, S("bob"), rec2.token, TTL)
    record = store.get(key)
    assert record is not None and record.state == "released"


def test_renew_many_judges_each_lease_on_its_own(store: LeaseStore, key: str) -> None:
    """The heartbeat's batch: one refused renewal loses only that lease."""
    good = grant(store, key + "-good", "alice", ttl=5.0)
    other = grant(store, key + "-other", "bob")
    gone = grant(store, key + "-gone", "carol")
    assert store.release(key + "-gone", S("carol"), gone.token)
    broken = grant(store, key + "-broken", "dave")
    store.force_release(key + "-broken", by="operator")
    assert store.renew_many([]) == []
    done = store.renew_many([
        (key + "-good", S("alice"), good.token, TTL),
        (key + "-other", S("mallory"), other.token, 3 * TTL),  # wrong secret
        (key + "-other", S("bob"), other.token + 1, 3 * TTL),  # wrong token
        (key + "-gone", S("carol"), gone.token, TTL),         # released
        (key + "-broken", S("dave"), broken.token, TTL),      # broken
        (key + "-never", S("erin"), 1, TTL),                  # never acquired
    ])
    assert done == [True, False, False, False, False, False]
    record = store.get(key + "-good")
    assert record is not None and record.holder == "alice" and record.token == good.token
    assert record.expires_at is not None and good.expires_at is not None
    assert record.expires_at > good.expires_at
    untouched = store.get(key + "-other")
    assert untouched is not None and untouched.expires_at is not None
    assert other.expires_at is not None  # not extended to 3 * TTL
    assert untouched.expires_at < other.expires_at + timedelta(seconds=TTL)
    assert store.get(key + "-never") is None
    for k in ("-gone", "-broken"):  # never resurrected
        after = store.get(key + k)
        assert after is not None and after.state == "released"
    assert store.renew_many([(key + "-other", S("bob"), other.token, TTL)]) == [True]


# -- release ---------------------------------------------------------------------

def test_release_clears_the_holder_but_keeps_the_record(store: LeaseStore, key: str) -> None:
    rec = grant(store, key, "alice")
    assert store.release(key, S("alice"), rec.token)
    record = store.get(key)
    assert record is not None
    assert record.state == "released" and record.holder is None and record.token == rec.token
    assert not store.release(key, S("alice"), rec.token), "a second release must report nothing done"


def test_release_with_wrong_holder_or_token_changes_nothing(store: LeaseStore, key: str) -> None:
    rec = grant(store, key, "alice")
    assert not store.release(key, S("mallory"), rec.token)
    assert not store.release(key, S("alice"), rec.token + 1)
    record = store.get(key)
    assert record is not None and record.holder == "alice" and record.state == "held"


def test_release_by_a_former_holder_leaves_the_new_holder_untouched(
    store: LeaseStore, key: str
) -> None:
    old = grant(store, key, "alice", ttl=SHORT_TTL)
    until(lambda: store.acquire(key, "bob", S("bob"), TTL, {}).granted, what="takeover after expiry")
    assert not store.release(key, S("alice"), old.token)
    record = store.get(key)
    assert record is not None and record.holder == "bob" and record.state == "held"
    assert record.token > old.token
    assert not store.acquire(key, "carol", S("carol"), TTL, {}).granted


def test_release_of_an_expired_untaken_lease_by_its_holder(store: LeaseStore, key: str) -> None:
    rec = grant(store, key, "alice", ttl=SHORT_TTL)
    until(lambda: expired(store, key), what="expiry")
    store.release(key, S("alice"), rec.token)  # may report either; must not break the key
    assert grant(store, key, "bob").token > rec.token


# -- identity: the public name proves nothing ------------------------------------------

def test_nothing_a_contender_sees_renews_or_releases_anothers_lease(
    store: LeaseStore, key: str
) -> None:
    """The holder name, token and meta are public (LeaseBusy, get, list,
    history, leasectl); only the owner secret renews or releases."""
    rec = grant(store, key, "alice", meta={"host": "w1", "pid": 7, "run_id": "r1"})
    busy = store.acquire(key, "mallory", S("mallory"), TTL, {})
    seen = busy.record
    assert seen is not None and seen.holder == "alice"
    listed = store.list(key)[0]
    events = store.history(key)
    visible = {seen.holder, str(seen.token), *map(str, seen.meta.values()),
               *(str(e.holder) for e in events), listed.holder or ""}
    for guess in sorted(visible):
        assert not store.renew(key, guess, seen.token, TTL), f"renewed with {guess!r}"
        assert not store.release(key, guess, seen.token), f"released with {guess!r}"
    assert not store.release(key, "", seen.token)
    current = store.get(key)
    assert current is not None and current.holder == "alice" and current.state == "held"
    assert current.token == rec.token
    # The secret is stored but never handed out.
    for shown in (repr(seen), repr(current), repr(listed), repr(events), repr(busy)):
        assert S("alice") not in shown
    assert not any(S("alice") in repr(e.detail) for e in events)
    # Only the operator's break touches it, and history says it was a break.
    store.force_release(key, by="ops@console")
    assert [e.kind for e in store.history(key)] == ["acquired", "broken"]
    assert store.history(key)[-1].holder == "alice"


# -- records, get and list ---------------------------------------------------------

def test_get_of_an_unknown_key_is_none(store: LeaseStore, key: str) -> None:
    assert store.get(key) is None


def test_meta_round_trips(store: LeaseStore, key: str) -> None:
    meta = {"dag_id": "billing", "run_id": "manual__2026-11-29T00:00:00+00:00",
            "try_number": 2, "map_index": -1, "host": "worker-1", "pid": 4242,
            "flow_run_id": None, "tags": ["a", "b"], "nested": {"x": 1.5, "ok": True}}
    grant(store, key, "alice", meta=meta)
    record = store.get(key)
    assert record is not None and record.meta == meta
    busy = store.acquire(key, "bob", S("bob"), TTL, {})
    assert busy.record is not None and busy.record.meta == meta


def test_keys_with_every_safe_character_round_trip(store: LeaseStore, key: str) -> None:
    odd = f"{key}/airflow:dag.task@v=1+x-y_z"
    rec = grant(store, odd, "alice")
    got = store.get(odd)
    assert got is not None and got.key == odd and got.token == rec.token
    assert [r.key for r in store.list(odd)] == [odd]


def test_expired_state_is_judged_by_the_store(store: LeaseStore, key: str) -> None:
    grant(store, key, "alice", ttl=SHORT_TTL)
    first = store.get(key)
    assert first is not None and first.state == "held"
    until(lambda: expired(store, key), what="expired state")
    record = store.get(key)
    assert record is not None and record.holder == "alice"
    assert record.expires_in is not None and record.expires_in <= 0


def test_list_filters_by_prefix_and_sorts_by_key(store: LeaseStore, key: str) -> None:
    for suffix in ("b", "a", "c"):
        grant(store, f"{key}-{suffix}", "alice")
    rec = grant(store, f"{key}x-other", "alice")
    store.release(f"{key}x-other", S("alice"), rec.token)
    listed = store.list(f"{key}-")
    assert [r.key for r in listed] == [f"{key}-a", f"{key}-b", f"{key}-c"]
    assert all(r.state == "held" for r in listed)
    everything = {r.key: r for r in store.list(key)}
    assert everything[f"{key}x-other"].state == "released"
    assert store.list(f"{key}-nothing-here") == []


# -- force release (the operator's break) ---------------------------------------------

def test_force_release_breaks_any_holder_and_returns_the_record(store: LeaseStore, key: str) -> None:
    rec = grant(store, key, "alice", meta={"host": "w1"})
    before = store.force_release(key, by="ops@console")
    assert before is not None and before.holder == "alice" and before.token == rec.token
    record = store.get(key)
    assert record is not None and record.state == "released" and record.token == rec.token
    assert not store.release(key, S("alice"), rec.token)
    assert store.force_release(key + "-never", by="ops") is None


def test_break_on_a_token_breaks_the_lease_that_still_carries_it(store: LeaseStore, key: str) -> None:
    rec = grant(store, key, "alice", meta={"host": "w1"})
    before = store.force_release(key, by="ops@console", token=rec.token)
    assert before is not None and before.holder == "alice" and before.token == rec.token
    record = store.get(key)
    assert record is not None and record.state == "released" and record.token == rec.token
    assert not store.renew(key, S("alice"), rec.token, TTL)
    last = store.history(key)[-1]
    assert (last.kind, last.token, last.holder) == ("broken", rec.token, "alice")
    assert last.detail.get("by") == "ops@console"


def test_break_on_a_stale_token_leaves_the_new_holder_alone(store: LeaseStore, key: str) -> None:
    """The check-then-break race, one step at a time: the operator reads
    alice's token, bob takes the key, the break on alice's token arrives."""
    alice = grant(store, key, "alice")
    seen = store.get(key)
    assert seen is not None and seen.token == alice.token
    assert store.release(key, S("alice"), alice.token)
    bob = grant(store, key, "bob")
    assert store.force_release(key, by="ops@console", token=seen.token) is None
    record = store.get(key)
    assert record is not None and record.holder == "bob" and record.state == "held"
    assert record.token == bob.token
    assert store.renew(key, S("bob"), bob.token, TTL)
    assert "broken" not in [e.kind for e in store.history(key)]
    # A released lease is not broken again, even on its own token.
    assert store.release(key, S("bob"), bob.token)
    assert store.force_release(key, by="ops@console", token=bob.token) is None
    assert "broken" not in [e.kind for e in store.history(key)]
    assert store.force_release(key + "-never", by="ops", token=1) is None


def test_break_on_a_token_races_new_holders_across_processes(
    store_url: str, key: str, tmp_path: Path
) -> None:
    """Two takers grant, renew and release the key as fast as they can while
    two breakers read it and break on the token they read: a new holder
    often takes the key between a breaker's read and its break. A break must
    only ever end the lease it aimed at, and a taker's release is refused
    exactly when its own lease was broken. Processes on every store processes
    can share; threads on the memory store (it lives in one process)."""
    rounds, takers, breakers = 100, 2, 2
    take_outs = [tmp_path / f"take-{i}.jsonl" for i in range(takers)]
    break_outs = [tmp_path / f"break-{i}.jsonl" for i in range(breakers)]
    stop = tmp_path / "stop"
    worker = break_race_worker

    def breakers_ready() -> None:
        until(lambda: all(worker.ready(out).exists() for out in break_outs), timeout=60,
              what="the breakers to connect")

    if store_url.startswith("memory:"):
        # Threads switch every 5 ms by default: too rarely to land between a
        # breaker's read and its break. Switch as often as CPython can.
        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)
        try:
            threads = [threading.Thread(target=worker.breaker, args=(store_url, key, stop, out))
                       for out in break_outs]
            for t in threads:
                t.start()
            breakers_ready()
            take_threads = [threading.Thread(target=worker.take,
                                             args=(store_url, key, rounds, break_outs, out))
                            for out in take_outs]
            for t in take_threads:
                t.start()
            for t in take_threads:
                t.join(timeout=150)
            stop.touch()
            for t in threads:
                t.join(timeout=30)
        finally:
            sys.setswitchinterval(switch)
        assert not any(t.is_alive() for t in threads + take_threads)
    else:
        command = [sys.executable, worker.__file__]
        breaking = [subprocess.Popen([*command, "break", "--url", store_url, "--key", key,
                                      "--out", str(out), "--stop", str(stop)]) for out in break_outs]
        taking: list[subprocess.Popen[bytes]] = []
        try:
            breakers_ready()
            waits = [arg for out in break_outs for arg in ("--breaker", str(out))]
            taking = [subprocess.Popen([*command, "take", "--url", store_url, "--key", key,
                                        "--out", str(out), "--rounds", str(rounds), *waits])
                      for out in take_outs]
            assert [p.wait(timeout=150) for p in taking] == [0] * takers
            stop.touch()
            assert [p.wait(timeout=30) for p in breaking] == [0] * breakers
        finally:
            for p in taking + breaking:
                if p.poll() is None:
                    p.kill()

    def rows(paths: list[Path]) -> list[dict[str, Any]]:
        return [json.loads(line) for p in paths for line in p.read_text().splitlines()]

    taken, aimed = rows(take_outs), rows(break_outs)
    broken = [r for r in aimed if r["broke"] is not None]
    missed = [r for r in aimed if r["broke"] is None]
    assert len(taken) >= rounds * takers
    assert [r for r in broken if r["broke"] != r["aimed"] or r["holder"] is None] == []
    broken_tokens = [r["broke"] for r in broken]
    assert len(set(broken_tokens)) == len(broken_tokens), "one lease broken twice"
    assert {r["token"] for r in taken if not r["released"]} == set(broken_tokens)
    assert broken and missed, f"the race was not exercised: {len(broken)} broken, {len(missed)} missed"
    for event in store_history_breaks(store_url, key):
        assert event.token in broken_tokens and str(event.detail.get("by")).startswith("breaker-")


def store_history_breaks(url: str, key: str) -> list[LeaseEvent]:
    with connect(url) as store:
        return [e for e in store.history(key, HISTORY_LIMIT) if e.kind == "broken"]


# -- history ---------------------------------------------------------------------------

def test_history_records_grants_releases_breaks_and_losses(store: LeaseStore, key: str) -> None:
    a = grant(store, key, "alice")
    store.release(key, S("alice"), a.token)
    b = grant(store, key, "bob")
    store.force_release(key, by="ops@console")
    store.record_event(key, "lost", "bob", b.token, {"reason": "renewal refused"})
    events = store.history(key)
    assert [(e.kind, e.token, e.holder) for e in events] == [
        ("acquired", a.token, "alice"), ("released", a.token, "alice"),
        ("acquired", b.token, "bob"), ("broken", b.token, "bob"), ("lost", b.token, "bob"),
    ]
    assert events[3].detail.get("by") == "ops@console"
    assert events[4].detail.get("reason") == "renewal refused"
    assert all(e.key == key and e.at.tzinfo is not None for e in events)
    assert [e.at for e in events] == sorted(e.at for e in events)
    assert [e.kind for e in store.history(key, limit=2)] == ["broken", "lost"]


def test_a_release_and_a_break_carry_the_grants_meta(store: LeaseStore, key: str) -> None:
    """Each event names what places it (issue 40, finding 1): the Leases page
    shows a key's events by the DAG in their meta, and a ``released`` or
    ``broken`` event whose ``acquired`` event was trimmed away (the store keeps
    100) must still say whose it is."""
    a = grant(store, key, "alice", meta={"dag_id": "billing", "run_id": "r1"})
    assert store.release(key, S("alice"), a.token)
    b = grant(store, key, "bob", meta={"flow_run_id": "0f0f"})
    assert store.force_release(key, by="ops@console") is not None
    released, broken = store.history(key)[1], store.history(key)[3]
    assert (released.kind, released.detail.get("meta")) == ("released", {"dag_id": "billing", "run_id": "r1"})
    assert (broken.kind, broken.token) == ("broken", b.token)
    assert broken.detail.get("meta") == {"flow_run_id": "0f0f"} and broken.detail.get("by") == "ops@console"
    assert store.history(key + "-never") == []


def test_history_records_an_expiry_takeover_in_the_grant(store: LeaseStore, key: str) -> None:
    """A holder that never released (a crash) and was taken over after its
    expiry leaves a trace: the taker's ``acquired`` event names the token and
    holder it took over, written by the acquire itself (no separate event that
    could be missing). A grant over a free key (released, broken, new) names
    none."""
    a = grant(store, key, "alice", ttl=SHORT_TTL, meta={"run_id": "r1"})
    assert not store.acquire(key, "bob", S("bob"), TTL, {}).granted  # busy: no trace
    until(lambda: expired(store, key), what="expiry")
    b = grant(store, key, "bob", meta={"run_id": "r2"})
    assert store.release(key, S("bob"), b.token)
    c = grant(store, key, "carol")
    store.force_release(key, by="ops@console")
    d = grant(store, key, "dave")
    events = store.history(key)
    assert [(e.kind, e.token, e.holder) for e in events] == [
        ("acquired", a.token, "alice"), ("acquired", b.token, "bob"),
        ("released", b.token, "bob"), ("acquired", c.token, "carol"),
        ("broken", c.token, "carol"), ("acquired", d.token, "dave"),
    ]
    taken = events[1].detail
    assert taken.get("took_over") == {"token": a.token, "holder": "alice"}, taken
    assert taken.get("meta") == {"run_id": "r2"}
    for plain in (events[0], events[3], events[5]):
            assert "took_over" not in plain.detail, plain
    assert not any(S("alice") in repr(e.detail) for e in events)


def test_an_expiry_takeover_names_a_holder_with_quotes_and_unicode(
    store: LeaseStore, key: str
) -> None:
    """The takeover detail is built by the store (Lua, SQL, a pipeline):
    a holder name that needs escaping comes back exactly."""
    odd = 'vm "7" \\ ünï:42'
    a = grant(store, key, odd, ttl=SHORT_TTL)
    until(lambda: expired(store, key), what="expiry")
    grant(store, key, "bob")
    assert store.history(key)[-1].detail.get("took_over") == {"token": a.token, "holder": odd}


def test_history_is_bounded_per_key(store: LeaseStore, key: str) -> None:
    for i in range(HISTORY_LIMIT // 2 + 5):
        rec = grant(store, key, f"h{i}")
        store.release(key, S(f"h{i}"), rec.token)
    events = store.history(key, limit=HISTORY_LIMIT * 2)
    assert len(events) <= HISTORY_LIMIT
    assert events[-1].kind == "released" and events[-1].token == rec.token


# -- waiting -----------------------------------------------------------------------------

def test_wait_for_release_returns_within_its_timeout(store: LeaseStore, key: str) -> None:
    grant(store, key, "alice")
    started = time.monotonic()
    store.wait_for_release(key, 0.2)
    assert time.monotonic() - started < 5.0  # bounded: never a hang


def test_a_notifying_store_wakes_waiters_on_release(store: LeaseStore, key: str) -> None:
    if not store.notifies:
        pytest.skip(f"{store.url} has no notification channel; waiters poll")
    woken = threading.Event()
    stop = threading.Event()

    def waiter() -> None:
        while not stop.is_set():
            if store.wait_for_release(key, 2.0):
                woken.set()
                return

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    for i in range(100):  # the waiter subscribes inside wait_for_release: retry a few times
        rec = grant(store, key, f"n{i}")
        assert store.release(key, S(f"n{i}"), rec.token)
        if woken.wait(0.1):
            break
    stop.set()
    thread.join(timeout=5)
    assert woken.is_set(), "a release never woke the waiter"


def test_lease_lock_uses_a_readable_name_and_never_shows_its_secret(
    store: LeaseStore, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """What LeaseLock puts in the store: the name ``host:pid`` for everyone,
    a fresh 128-bit secret that only the holding process ever sees."""
    caplog.set_level(logging.DEBUG, logger="lease_integrations")
    lock = LeaseLock(store, key, ttl=TTL)
    with lock.hold() as lease:
        assert lease.holder == f"{socket.gethostname()}:{os.getpid()}"
        assert len(lease.secret) == 32 and int(lease.secret, 16) >= 0
        with pytest.raises(LeaseBusy) as busy:
            LeaseLock(store, key, ttl=TTL).acquire(wait=0)
        assert busy.value.holder == lease.holder
        assert not store.renew(key, lease.holder, lease.token, TTL)
        assert not store.release(key, lease.holder, lease.token)
        assert store.renew(key, lease.secret, lease.token, TTL)
        shown = [repr(lease), repr(lock), str(busy.value), repr(store.get(key)),
                 repr(store.list(key)), repr(store.history(key)), caplog.text]
    shown.append(repr(store.history(key)))
    assert not any(lease.secret in text for text in shown)
    record = store.get(key)
    assert record is not None and record.state == "released"
