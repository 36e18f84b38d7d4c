"""Makes the screenshots in docs/airflow/ (not a test): the same api-server
harness and browser as the tests, with a few illustrative leases taken
through the public API. Run from the repository root in the Airflow env:

    .venv-airflow/bin/python tests/airflow_ui/docs_screenshot.py docs/airflow
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from api_server import ApiServer, free_port, poll
from cdp import Browser, chromium_binary
from ui_flow import FRAME_TEXT, open_leases, sign_in

from lease_integrations import LeaseLock, connect

EXPIRED = """
import os, sys
from lease_integrations import LeaseLock, connect
LeaseLock(connect(sys.argv[1]), "warehouse-compaction", ttl=1.0, meta={"dag_id": "warehouse",
    "run_id": "manual__2026-11-30T13:40:00+00:00", "task_id": "compact", "try_number": 2}).acquire()
os._exit(0)  # a holder that died without releasing: its lease expires
"""


def main(out: Path) -> None:
    home = Path(tempfile.mkdtemp(prefix="lease-ui-docs-"))
    server = ApiServer(home, home / "leases.db").start()
    store = connect(server.store_url)
    try:
        released = LeaseLock(store, "ledger-sync", ttl=60, meta={"dag_id": "ledger"})
        released.release(released.acquire())
        subprocess.run([sys.executable, "-c", EXPIRED, server.store_url], check=True, timeout=60)
        LeaseLock(store, "nightly-billing", ttl=600, meta={
            "dag_id": "billing", "run_id": "scheduled__2026-11-30T02:00:00+00:00",
            "task_id": "charge_cards", "try_number": 1, "map_index": -1}).acquire()
        LeaseLock(store, "reports/daily-export", ttl=600, meta={
            "flow_name": "daily-export", "flow_run_id": "5b0e8a52-3c1e-4f7a-9d51-2a6f0e4b9c11"}).acquire()
        poll(lambda: store.get("warehouse-compaction").state == "expired",  # type: ignore[union-attr]
             "the dead holder's lease to expire", 30.0)
        binary = chromium_binary()
        assert binary, "chromium is not installed"
        browser = Browser(binary, free_port())
        try:
            browser.call("Page.enable")
            browser.call("Emulation.setDeviceMetricsOverride", width=1400, height=560,
                         deviceScaleFactor=1, mobile=False)
            sign_in(browser, server.base, "admin", server.passwords["admin"])
            open_leases(browser, "nightly-billing")
            browser.screenshot(out / "leases-page.png")
            browser.call("Emulation.setEmulatedMedia",
                         features=[{"name": "prefers-color-scheme", "value": "dark"}])
            browser.wait_for("matchMedia('(prefers-color-scheme: dark)').matches", "dark mode")
            browser.screenshot(out / "leases-page-dark.png")
            browser.call("Emulation.setEmulatedMedia",
                         features=[{"name": "prefers-color-scheme", "value": "light"}])
            browser.evaluate("document.querySelector('iframe').contentDocument"
                             ".querySelector('a.danger').click()")
            browser.wait_for(f"{FRAME_TEXT}.includes('Break token')", "the confirm page")
            browser.screenshot(out / "leases-break-confirm.png")
        finally:
            browser.close()
    finally:
        store.close()
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
