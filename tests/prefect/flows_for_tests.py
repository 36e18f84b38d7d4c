"""Leased flows the tests run, in the test process and in child processes.

Coordination is through files in ``$LEASE_TEST_DIR`` (read when a body runs):
a body writes ``entered-<run>.json`` (its lease, and which other bodies were
inside at that moment), waits for the file ``release`` (bounded), then writes
``exited-<run>``. The store comes from ``$LEASE_STORE_URL``, so these flows
also exercise the environment-variable configuration path.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.context import FlowRunContext
from prefect.task_runners import ThreadPoolTaskRunner

import lease_integrations
from lease_integrations import Lease
from lease_integrations.core.supersede_guards import only_newer, only_same
from lease_integrations.prefect import current_lease, leased, leased_flow

LONG_TTL = 12.0
TTL = 5.0  # heartbeats every 1.7 s: room to keep up on a loaded 2-core machine
#: Upper bound for any wait on the test's go-ahead: a lost test fails, never hangs.
BOUND = 90.0


def coord_dir() -> Path:
    return Path(os.environ["LEASE_TEST_DIR"])


def _run_name() -> str:
    ctx = FlowRunContext.get()
    return str(ctx.flow_run.id) if ctx and ctx.flow_run else f"pid{os.getpid()}"


def enter(label: str = "") -> str:
    """Record entry with the lease held and the bodies inside right now."""
    d = coord_dir()
    run = _run_name()
    inside = sorted(
        p.name[len("entered-"):-len(".json")] for p in d.glob("entered-*.json")
        if not (d / f"exited-{p.name[len('entered-'):-len('.json')]}").exists()
    )
    lease = current_lease()
    record = {"run": run, "label": label, "pid": os.getpid(), "token": lease.token,
              "library": str(Path(lease_integrations.__file__).resolve().parents[1]),
              "key": lease.key, "holder": lease.holder, "meta": lease.meta, "others_inside": inside,
              "thread": threading.current_thread().name}
    tmp = d / f".entered-{run}.tmp"
    tmp.write_text(json.dumps(record))
    tmp.rename(d / f"entered-{run}.json")
    return run


def wait_for_release() -> None:
    release = coord_dir() / "release"
    deadline = time.monotonic() + BOUND
    while not release.exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the test never released this body")
        time.sleep(0.02)


def leave(run: str) -> None:
    (coord_dir() / f"exited-{run}").write_text("")


def body(label: str = "") -> int:
    run = enter(label)
    wait_for_release()
    leave(run)
    return current_lease().token


async def abody(label: str = "") -> int:
    run = enter(label)
    release = coord_dir() / "release"
    deadline = time.monotonic() + BOUND
    while not release.exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the test never released this body")
        await asyncio.sleep(0.02)
    leave(run)
    return current_lease().token


# -- contention: two runs of one flow ------------------------------------------
@leased_flow(key="race-sync", ttl=TTL, on_busy="skip")
def race_sync_skip() -> int:
    return body()


@leased_flow(key="race-sync", ttl=TTL, on_busy="fail")
def race_sync_fail() -> int:
    return body()


@leased_flow(key="race-sync", ttl=TTL, on_busy="wait", wait_timeout=BOUND)
def race_sync_wait() -> int:
    return body()


@leased_flow(key="race-async", ttl=TTL, on_busy="skip")
async def race_async_skip() -> int:
    return await abody()


@leased_flow(key="race-async", ttl=TTL, on_busy="wait", wait_timeout=2.0)
async def race_async_wait_short() -> int:
    return await abody()


# -- one lease per tenant -------------------------------------------------------
@leased_flow(key="billing-{tenant}", ttl=TTL, on_busy="skip")
def tenant_billing(tenant: str, dry_run: bool = False) -> int:
    return body(tenant)


# -- a body that runs until the test stops it (loss, crash) ---------------------
# Evidence of work, in $LEASE_TEST_DIR: ``ticks`` (``<wall clock> <who>`` per
# line, appended by every thread that works) and ``lost`` (the wall-clock time
# the lease's on_lost callback ran: the moment the loss was known).
def tick(who: str) -> None:
    fd = os.open(coord_dir() / "ticks", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{time.time():.6f} {who}\n".encode())
    finally:
        os.close(fd)


def record_loss(lease: Lease) -> None:
    tmp = coord_dir() / ".lost.tmp"
    tmp.write_text(f"{time.time():.6f}")
    tmp.rename(coord_dir() / "lost")  # whoever reads it reads it whole


def lost_for(seconds: float) -> bool:
    """True once the loss has been known for ``seconds``."""
    lost = coord_dir() / "lost"
    return lost.exists() and time.time() > float(lost.read_text() or "inf") + seconds


@leased_flow(key="long-sync", ttl=TTL, on_busy="fail")
def long_sync() -> int:
    current_lease().on_lost(record_loss)
    run = enter()
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline and not (coord_dir() / "release").exists():
        tick("body")
        time.sleep(0.02)
    leave(run)
    return current_lease().token


@leased_flow(key="long-async", ttl=TTL, on_busy="fail")
async def long_async() -> int:
    current_lease().on_lost(record_loss)
    run = enter()
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline and not (coord_dir() / "release").exists():
        tick("body")
        await asyncio.sleep(0.02)
    leave(run)
    return current_lease().token


@leased_flow(key="cancelled-async", ttl=TTL, on_busy="fail", on_lost="cancel")
async def cancelled_async() -> int:
    """``on_lost="cancel"``: the body swallows the first cancel (as
    ``wait_for`` may on Python 3.10/3.11) and must meet the next one."""
    current_lease().on_lost(record_loss)
    run = enter()
    deadline = time.monotonic() + BOUND
    swallowed = False
    while time.monotonic() < deadline:
        tick("body")
        try:
            await asyncio.sleep(0.02)
        except asyncio.CancelledError:
            if swallowed:
                raise
            swallowed = True
            (coord_dir() / f"swallowed-{run}").write_text("")
    leave(run)
    return current_lease().token


@task
def ticking_task(i: int, stop_after_loss: float | None = None) -> int:
    """Works (ticks) until the flow's release file, BOUND, or, when
    ``stop_after_loss`` is set, that long after the loss was known."""
    deadline = time.monotonic() + BOUND
    n = 0
    while time.monotonic() < deadline and not (coord_dir() / "release").exists():
        if stop_after_loss is not None and lost_for(stop_after_loss):
            break
        tick(f"task{i}")
        n += 1
        time.sleep(0.02)
    return n


def fan_out_body(stop_after_loss: float | None = None) -> int:
    """Submit four ticking tasks to the thread-pool task runner and wait for
    them (the issue-23 shape the old in-thread interrupt could not stop)."""
    current_lease().on_lost(record_loss)
    futures = [ticking_task.submit(i, stop_after_loss) for i in range(4)]
    run = enter()
    total = sum(future.result() for future in futures)
    leave(run)
    return total


@leased_flow(key="fan-out", ttl=TTL, on_busy="fail",
             task_runner=ThreadPoolTaskRunner(max_workers=4))
def fan_out() -> int:
    return fan_out_body()


@flow
def calls_fan_out() -> int:
    """A plain flow whose subflow, in this process, holds the lease."""
    return fan_out()


@leased_flow(key="fan-out", ttl=LONG_TTL, on_busy="fail",
             task_runner=ThreadPoolTaskRunner(max_workers=4))
def fan_out_long_ttl() -> int:
    return fan_out_body()


@flow
def calls_fan_out_long_ttl() -> int:
    """``calls_fan_out`` at a ttl whose ladder gives the stop hooks about
    0.8 s: room for one slow API call, not for five in a row."""
    return fan_out_long_ttl()


@leased_flow(key="fan-out", ttl=TTL, on_busy="fail", on_lost="check",
             task_runner=ThreadPoolTaskRunner(max_workers=4))
def fan_out_checked(stop_after_loss: float = 2.5) -> int:
    return fan_out_body(stop_after_loss)


def swallowing_body() -> int:
    """Job code that handles errors per item: ``except Exception`` must not
    swallow the lost lease."""
    current_lease().on_lost(record_loss)
    run = enter()
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        try:
            tick("body")
            time.sleep(0.02)
        except Exception:
            (coord_dir() / f"swallowed-{run}").write_text("")
    leave(run)
    return 0


@leased_flow(key="swallow-flow", ttl=TTL, on_busy="fail")
def swallowing_flow() -> int:
    return swallowing_body()


@flow
def swallowing_leased_block() -> int:
    with leased("swallow-block", ttl=TTL):
        return swallowing_body()


@leased_flow(key="long-sync", ttl=TTL, on_busy="wait", wait_timeout=BOUND)
def long_sync_waiter() -> dict[str, Any]:
    lease = current_lease()
    return {"token": lease.token, "holder": lease.holder}


# -- deployments ----------------------------------------------------------------
@leased_flow(key="deployed", ttl=TTL, on_busy="skip")
def deployed(label: str = "") -> dict[str, Any]:
    lease = current_lease()
    (coord_dir() / f"deployed-{_run_name()}.json").write_text(
        json.dumps({"token": lease.token, "meta": lease.meta, "label": label,
                    "thread": threading.current_thread().name})
    )
    return {"token": lease.token}


@leased_flow(key="deployed", ttl=TTL, on_busy="skip")
async def deployed_async(label: str = "") -> dict[str, Any]:
    lease = current_lease()
    (coord_dir() / f"deployed-{_run_name()}.json").write_text(
        json.dumps({"token": lease.token, "meta": lease.meta, "label": label})
    )
    return {"token": lease.token}


@leased_flow(ttl=60.0, on_busy="skip")
def cancellable(label: str = "") -> None:
    """Holds its 60 s lease until cancelled (the release file never comes)."""
    run = enter(label)
    wait_for_release()
    leave(run)


@leased_flow(ttl=TTL)
def named_by_flow() -> str:
    """Default key: the flow's name (so with_options(name=...) must re-derive it)."""
    return current_lease().key


# -- Prefect events (test_events) ------------------------------------------------
@leased_flow(key="events-normal", ttl=TTL)
def events_normal() -> int:
    """Writes its lease's owner secret where the test can check that no
    event carries it."""
    lease = current_lease()
    (coord_dir() / "secret").write_text(lease.secret)
    return lease.token


@leased_flow(key="events-lost", ttl=20.0, on_busy="fail")
def events_lost() -> None:
    """``long_sync`` with a 20 s ttl: a 4 s margin, so the fail-stop ladder has
    2.2 s for its callbacks and stop hooks (the test delays the ``lost`` event)."""
    run = enter()
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline and not (coord_dir() / "release").exists():
        tick("body")
        time.sleep(0.02)
    leave(run)


# -- the keeper (test_keeper_busy_flow) -------------------------------------------
@leased_flow(key="busy-holder", ttl=2.0, on_busy="fail")
def busy_holder(seconds: int = 5) -> int:
    """One call that keeps the GIL for ``seconds`` (2.5 ttl: issue 31), so the
    flow's interpreter never runs while its lease must be renewed. Writes
    ``pid``, waits for the file ``go`` (made once the keeper has the lease),
    then writes ``call-start`` and ``call-end`` (monotonic times)."""
    (coord_dir() / "pid").write_text(str(os.getpid()))
    deadline = time.monotonic() + BOUND
    while not (coord_dir() / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    (coord_dir() / "call-start").write_text(f"{time.monotonic():.6f}")
    ctypes.PyDLL(None).sleep(seconds)
    (coord_dir() / "call-end").write_text(f"{time.monotonic():.6f}")
    return current_lease().token


# -- supersede (test_supersede) ----------------------------------------------------
# A body that writes fenced rows into $LEASE_TEST_DIR/ledger.db (an SqlFence
# check and the row in one transaction: a committed row is a write the fence
# accepted) until the file ``release`` exists. It first writes
# ``body-<run>.json``: its token, pid, when it began, and which other bodies'
# processes still ran at that moment.
def fenced_rows() -> dict[str, Any]:
    from lease_integrations import SqlFence, StaleToken
    from lease_integrations.keeper.kernel import is_gone, process_state

    lease = current_lease()
    d = coord_dir()
    fence = SqlFence()  # the ledger exists before the body announces itself
    db = sqlite3.connect(d / "ledger.db", isolation_level=None, timeout=30)
    db.execute("CREATE TABLE IF NOT EXISTS ledger_rows (token INTEGER, pid INTEGER, at REAL)")
    fence.create_table(db)
    began = time.time()
    others = [json.loads(p.read_text()) for p in d.glob("body-*.json")]
    record = {"run": _run_name(), "token": lease.token, "pid": os.getpid(), "at": began,
              "meta": lease.meta,
              "others_running": [o["pid"] for o in others
                                 if not is_gone(process_state(o["pid"]))]}
    tmp = d / f".body-{record['run']}.tmp"
    tmp.write_text(json.dumps(record))
    tmp.rename(d / f"body-{record['run']}.json")
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline and not (d / "release").exists():
        db.execute("BEGIN IMMEDIATE")
        try:
            fence.check(db, "ledger", lease.token)
            db.execute("INSERT INTO ledger_rows VALUES (?, ?, ?)",
                       (lease.token, os.getpid(), time.time()))
        except StaleToken:
            db.execute("ROLLBACK")
        else:
            db.execute("COMMIT")
        time.sleep(0.005)  # the pace of the work, not a synchronisation
    return {"token": lease.token}


@leased_flow(key="supersede-same", ttl=LONG_TTL, on_busy="supersede",
             supersede_if=only_same("parameters_sha256"))
def fenced_writer(region: str = "eu") -> dict[str, Any]:
    """Replaces a run of the same parameters; a run of others is refused."""
    return fenced_rows()


@leased_flow(key="supersede-newer", ttl=LONG_TTL, on_busy="supersede",
             supersede_if=only_newer("scheduled_start"))
def newest_writer(region: str = "eu") -> dict[str, Any]:
    """Replaces a run scheduled earlier; one scheduled later is left alone."""
    return fenced_rows()


@leased_flow(key="supersede-same", ttl=LONG_TTL, on_busy="supersede",
             supersede_if=only_same("parameters_sha256"))
async def fenced_writer_async(region: str = "eu") -> dict[str, Any]:
    """``fenced_writer`` as an async flow (``hold_async(supersede=True)``)."""
    return await asyncio.to_thread(fenced_rows)
