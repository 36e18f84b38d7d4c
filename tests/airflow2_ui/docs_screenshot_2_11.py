"""Makes docs/airflow/leases-page-2.11.png (not a test): the same webserver
harness and browser as the tests, with a few illustrative leases taken
through the public API. Run from the repository root in the 2.11 env:

    .venv-airflow-2.11/bin/python tests/airflow2_ui/docs_screenshot_2_11.py docs/airflow
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "airflow_ui"))

from api_server import free_port
from cdp import Browser, chromium_binary
from ui_flow_2_11 import open_leases, sign_in
from webserver2 import Webserver2

from lease_integrations import LeaseLock, connect


def main(out: Path) -> None:
    home = Path(tempfile.mkdtemp(prefix="lease-ui2-docs-"))
    server = Webserver2(home, home / "leases.db").start()
    store = connect(server.store_url)
    try:
        released = LeaseLock(store, "ledger-sync", ttl=60, meta={"dag_id": "ledger"})
        released.release(released.acquire())
        LeaseLock(store, "nightly-billing", ttl=600, meta={
            "dag_id": "billing", "run_id": "scheduled__2026-11-30T02:00:00+00:00",
            "task_id": "charge_cards", "try_number": 1, "map_index": -1}).acquire()
        LeaseLock(store, "warehouse-compaction", ttl=600, meta={
            "dag_id": "warehouse", "run_id": "manual__2026-11-30T13:40:00+00:00",
            "task_id": "compact", "try_number": 2}).acquire()
        binary = chromium_binary()
        assert binary, "chromium is not installed"
        browser = Browser(binary, free_port())
        try:
            browser.call("Page.enable")
            browser.call("Emulation.setDeviceMetricsOverride", width=1400, height=480,
                         deviceScaleFactor=1, mobile=False)
            sign_in(browser, server.base, "admin", server.passwords["admin"])
            open_leases(browser, "nightly-billing")
            browser.screenshot(out / "leases-page-2.11.png")
        finally:
            browser.close()
    finally:
        store.close()
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
