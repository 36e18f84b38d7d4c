"""The main demo (``./run demo``): two overlapping runs of one nightly job on
the embedded SQLite store, then a crashed holder recovered after its ttl.

Each "run" is a separate process, as it would be under Airflow or Prefect:
``python -m lease_integrations.demo job --url URL --run-id NAME``.

The store and the ledger live in a fresh temporary folder, removed at the end
(the history is printed first, as ``leasectl history`` shows it); ``--keep``
keeps the folder and says where it is, to look around with ``leasectl``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lease_integrations import LeaseBusy, LeaseLock, SqlFence, connect

KEY = "nightly-billing"
TTL = 3.0


def job(url: str, run_id: str, seconds: float, ledger: str, wait: float | None) -> int:
    """One run of the nightly job: bill under the lease, fenced by its token."""
    store = connect(url)
    lock = LeaseLock(store, KEY, ttl=TTL)
    started = time.monotonic()
    try:
        with lock.hold(wait=wait, meta={"run_id": run_id}) as lease:
            waited = time.monotonic() - started
            after = f" after waiting {waited:.1f} s" if waited > 0.5 else ""
            print(f"[{run_id}] holding the lease{after}: token {lease.token}; billing...", flush=True)
            time.sleep(seconds)
            with sqlite3.connect(ledger, isolation_level=None) as conn:
                conn.execute("BEGIN IMMEDIATE")
                SqlFence().check(conn, "invoices", lease.token)  # refuses an older token
                conn.execute("INSERT INTO invoices (token, run_id) VALUES (?, ?)", (lease.token, run_id))
                conn.execute("COMMIT")
            print(f"[{run_id}] done: invoices written with fencing token {lease.token}", flush=True)
            return 0
    except LeaseBusy as busy:
        print(f"[{run_id}] not started: {busy}", flush=True)
        return 3


def _spawn(url: str, run_id: str, seconds: float, ledger: str, wait: str = "0",
           env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "lease_integrations.demo", "job", "--url", url, "--run-id", run_id,
         "--seconds", str(seconds), "--ledger", ledger, "--wait", wait],
        stdout=subprocess.PIPE, text=True, env=env,
    )


def _read_until_holding(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        print(line, end="", flush=True)
        if "holding the lease" in line:
            return
    raise SystemExit("the first run never took the lease")


def _finish(proc: subprocess.Popen[str]) -> int:
    out, _ = proc.communicate(timeout=60)
    print(out, end="", flush=True)
    return proc.returncode


def main_demo(keep: bool = False) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="lease-demo-"))
    try:
        code = _demo(workdir)
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if keep:
        print(f"\nKept {workdir} (--keep); look around with:  {_leasectl()} --url "
              f"sqlite://{workdir / 'leases.db'} list\nand remove the folder when done.")
    else:
        print(f"\nRemoved the demo's folder {workdir} (--keep keeps it, to try leasectl on it).")
    return code


def _demo(workdir: Path) -> int:
    from .cli import main as leasectl

    url = f"sqlite://{workdir / 'leases.db'}"
    ledger = str(workdir / "billing.db")
    with sqlite3.connect(ledger) as conn:
        conn.execute("CREATE TABLE invoices (token INTEGER, run_id TEXT)")
        SqlFence().create_table(conn)
    print(f"Embedded store: {url}  (key {KEY!r}, ttl {TTL:g} s, heartbeat every {TTL / 3:g} s)\n")

    print("1. The scheduled run and a manual trigger overlap:")
    scheduled = _spawn(url, "scheduled__2026-11-29", 2.0, ledger)
    _read_until_holding(scheduled)
    manual = _spawn(url, "manual__2026-11-29T01:02", 0.1, ledger)
    manual_rc = _finish(manual)
    scheduled_rc = _finish(scheduled)
    if (scheduled_rc, manual_rc) != (0, 3):
        print(f"unexpected exit codes: scheduled {scheduled_rc}, manual {manual_rc}")
        return 1

    # A killed run's keeper would give its lease back at once; a run whose
    # machine died has no keeper left: that run is the one shown (no keeper).
    print("\n2. A run's machine dies while it holds the lease (SIGKILL, no keeper left):")
    crashed = _spawn(url, "scheduled__2026-11-30", 60.0, ledger,
                     env={**os.environ, "LEASE_KEEPER": "off"})
    _read_until_holding(crashed)
    os.kill(crashed.pid, signal.SIGKILL)
    crashed.wait()
    record = connect(url).get(KEY)
    assert record is not None
    print(f"   killed pid {crashed.pid}; the store still shows it as holder "
          f"(token {record.token}, expires in {record.expires_in:.1f} s). Nobody clears it by hand.")
    killed_at = time.monotonic()
    retry = _spawn(url, "retry__2026-11-30", 0.2, ledger, wait=str(TTL * 4))
    if _finish(retry) != 0:
        return 1
    print(f"   recovered {time.monotonic() - killed_at:.1f} s after the crash (ttl {TTL:g} s), "
          "with a new, higher fencing token.")

    with sqlite3.connect(ledger) as conn:
        rows = conn.execute("SELECT token, run_id FROM invoices ORDER BY rowid").fetchall()
    print("\nInvoices table (token, run):", rows)
    print(f"\nWhat `leasectl history {KEY}` shows of it:", flush=True)
    leasectl(["--url", url, "history", KEY])
    return 0


def _leasectl() -> str:
    """How to run leasectl from the user's shell: ``./run demo`` uses ``.venv``
    without activating it, so a bare ``leasectl`` would not be found there."""
    beside = Path(sys.executable).parent / "leasectl"
    if not beside.exists() or shutil.which("leasectl") == str(beside):
        return "leasectl"
    relative = os.path.relpath(beside)
    return relative if not relative.startswith("..") else str(beside)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lease_integrations.demo")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("job", help="one run of the demo job")
    run.add_argument("--url", required=True)
    run.add_argument("--run-id", required=True)
    run.add_argument("--seconds", type=float, default=1.0)
    run.add_argument("--ledger", required=True)
    run.add_argument("--wait", type=float, default=0.0)
    parser.add_argument("--keep", action="store_true",
                        help="keep the demo's temporary folder (store and ledger) for leasectl")
    args = parser.parse_args(argv)
    if args.command == "job":
        return job(args.url, args.run_id, args.seconds, args.ledger, args.wait)
    return main_demo(keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
