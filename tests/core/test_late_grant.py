"""A grant that reaches the caller after its own trust window closed is never
handed out. The caller cannot know when the store granted it: the lease may
already have expired there and been granted to someone else (a process
SIGSTOPped between the store's grant and reading the reply did exactly that
in a soak run, and two holders overlapped). Such a grant is given back and
the key asked for again; a second late grant in a row is an error. Delays are
real: a SIGSTOP of the caller, a write lock another connection holds, a slow
network in front of the store."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from lease_integrations import Lease, LeaseLock, LeaseLost, LeaseStore, StoreUnavailable, connect
from tests.faults.outage_support import until
from tests.safety.proxy import FaultProxy

T = TypeVar("T")

TTL = 1.0  # margin ttl/5: a grant is trusted for 0.8 s from the attempt's start

CALLER = textwrap.dedent("""
    import json, sys
    from lease_integrations import LeaseBusy, LeaseLock, connect
    url, key = sys.argv[1], sys.argv[2]
    lock = LeaseLock(connect(url), key, ttl=float(sys.argv[3]))
    lock.store.get(key)  # connected before the store is paused
    # Its keeper has the store open too (an acquire waits for that): the
    # client the pause blocks is then this acquire, not the keeper's opening.
    with LeaseLock(lock.store, key + "-warm", ttl=float(sys.argv[3])).hold():
        pass
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        lease = lock.acquire(wait=0)
        print(json.dumps({"outcome": "granted", "token": lease.token,
                          "trusted_for": lease.trusted_for()}), flush=True)
    except LeaseBusy as busy:
        print(json.dumps({"outcome": "busy", "holder": busy.holder}), flush=True)
""")


def held(store: LeaseStore, key: str) -> bool:
    record = store.get(key)
    return record is not None and record.holder is not None and (record.expires_in or 0.0) > 0


def test_a_caller_stopped_between_grant_and_reply_gets_busy_not_an_overlap(
        redis_url: str, key: str) -> None:
    """The soak's failure, made on purpose: the store grants while the caller
    is stopped, the grant expires, a rival takes the key; then the caller
    resumes and reads its grant. It must answer busy, naming the rival, and
    leave the rival's lease alone."""
    admin = redis.Redis.from_url(redis_url)
    store = connect(redis_url)
    caller = subprocess.Popen([sys.executable, "-c", CALLER, redis_url, key, str(TTL)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert caller.stdout is not None and caller.stdin is not None
        assert caller.stdout.readline().strip() == "ready"
        admin.client_pause(60_000, all=False)  # writes wait; reads go on
        try:
            caller.stdin.write("go\n")
            caller.stdin.flush()
            until(lambda: int(admin.info("clients")["blocked_clients"]) >= 1, 30,
                  "the caller's acquire to reach the paused server")
            caller.send_signal(signal.SIGSTOP)
        finally:
            admin.client_unpause()  # the server grants; the reply waits in the socket
        until(lambda: held(store, key), 30, "the stopped caller's grant")
        until(lambda: not held(store, key), 30, "the stopped caller's grant to expire")
        rival = LeaseLock(store, key, ttl=30.0).acquire(wait=0)
        caller.send_signal(signal.SIGCONT)
        answer = json.loads(caller.stdout.readline())
        assert caller.wait(timeout=30) == 0
    finally:
        if caller.poll() is None:
            caller.send_signal(signal.SIGCONT)
            caller.kill()
            caller.wait()
    assert answer == {"outcome": "busy", "holder": rival.holder}, \
        f"the late grant was handed out while {rival.holder} held the key: {answer}"
    record = store.get(key)
    assert record is not None and (record.holder, record.token) == (rival.holder, rival.token)
    LeaseLock(store, key, ttl=30.0).release(rival)


def behind_a_held_write_lock(path: Path, call: Callable[[], T]) -> T | BaseException:
    """``call()`` in a thread while another connection holds SQLite's write
    lock on ``path`` for a whole ttl after the call began: its store call
    answers past the trust window. What it returned, or raised."""
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    calling = threading.Event()
    outcome: list[T | BaseException] = []

    def run() -> None:
        calling.set()
        try:
            outcome.append(call())
        except BaseException as exc:  # returned to the test
            outcome.append(exc)

    caller = threading.Thread(target=run)
    caller.start()
    try:
        assert calling.wait(10)
        time.sleep(TTL)  # the fault: the write lock held a whole ttl past the call
    finally:
        blocker.execute("COMMIT")
        blocker.close()
    caller.join(30)
    assert not caller.is_alive()
    return outcome[0]


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_late_grant_is_given_back_and_the_key_taken_again(tmp_path: Path, key: str,
                                                           face: str) -> None:
    """Another connection holds SQLite's write lock past the trust window:
    the grant that follows is late. Nobody else wants the key, so asking
    again grants it afresh, with a whole window to trust."""
    path = tmp_path / "leases.db"
    lock = LeaseLock(connect(f"sqlite://{path}"), key, ttl=TTL)
    lease = behind_a_held_write_lock(
        path, lambda: lock.acquire(wait=0) if face == "sync"
        else asyncio.run(lock.acquire_async(wait=0)))
    assert isinstance(lease, Lease), lease
    try:
        assert lease.trusted_for() > 0 and not lease.lost.is_set()
        events = [(e.kind, e.token) for e in lock.store.history(key)]
        late = events[0][1]
        assert late < lease.token
        assert events == [("acquired", late), ("released", late), ("acquired", lease.token)]
    finally:
        lock.release(lease)


def test_a_store_that_always_answers_too_late_is_an_error_and_leaves_the_key_free(
        redis_url: str, key: str) -> None:
    """Every round trip slower than the window: two late grants, both given
    back, then an error naming the times, not a lease lost on arrival."""
    parts = urlsplit(redis_url)
    assert parts.hostname and parts.port
    proxy = FaultProxy(parts.hostname, parts.port)
    try:
        userinfo = parts.netloc.rpartition("@")[0]
        slow_url = urlunsplit(parts._replace(
            netloc=(userinfo + "@" if userinfo else "") + f"127.0.0.1:{proxy.port}"))
        lock = LeaseLock(connect(slow_url), key, ttl=TTL)
        lock.store.get(key)  # connected before the delay
        proxy.delay = 0.45  # each way: a round trip of 0.9 s against a 0.8 s window
        with pytest.raises(StoreUnavailable, match="twice in a row only after its trust window"):
            lock.acquire(wait=0)
    finally:
        proxy.close()
    store = connect(redis_url)
    assert not held(store, key), "a given-back grant was left in the store"
    assert [e.kind for e in store.history(key)] == ["acquired", "released"] * 2


def test_adopting_with_a_renewal_that_answers_too_late_raises_lease_lost(
        tmp_path: Path, key: str) -> None:
    """adopt() trusts the lease from its renewal's start: a renewal held up
    past the window hands over nothing that could be trusted."""
    path = tmp_path / "leases.db"
    store = connect(f"sqlite://{path}")
    record = store.acquire(key, "first", "the-secret", 30.0, {}).record
    assert record is not None and record.holder == "first"
    token = record.token
    outcome = behind_a_held_write_lock(
        path, lambda: LeaseLock(store, key, ttl=TTL).adopt(token, "the-secret"))
    assert isinstance(outcome, LeaseLost) and "past its trust window" in str(outcome), outcome
