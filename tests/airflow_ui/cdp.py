"""A headless Debian ``chromium`` driven over the Chrome DevTools Protocol:
the browser's own websocket, spoken with the ``websockets`` package Airflow
already depends on. Nothing is downloaded at run time (no driver, no
browser bundle)."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api_server import ROOT, free_port
from websockets.sync.client import ClientConnection, connect

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,900")
START_WAIT = 60.0
#: What DevTools answers to an evaluation cut short by a navigation.
NAVIGATED = ("Inspected target navigated or closed", "Execution context was destroyed")
#: Where the browser tests keep their screenshots.
ARTIFACTS = Path(os.environ.get("LEASE_TEST_ARTIFACTS") or ROOT / ".lease-test-servers" / "artifacts")


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One chromium process and one page target; every call has a deadline."""

    def __init__(self, binary: str, port: int) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="lease-ui-chromium-"))
        self.log = self.profile / "chromium.out"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [binary, *FLAGS, f"--user-data-dir={self.profile}",
                 f"--remote-debugging-port={port}", "--remote-debugging-address=127.0.0.1",
                 "about:blank"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self._stack = contextlib.ExitStack()
        try:
            self.ws: ClientConnection = self._stack.enter_context(
                connect(self._page_socket(port), max_size=64 * 2**20, open_timeout=START_WAIT))
        except BaseException:
            self._stop_process()
            raise
        self._ids = itertools.count(1)

    def _page_socket(self, port: int) -> str:
        deadline = time.monotonic() + START_WAIT
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"chromium exited: {self.log.read_text(errors='replace')}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                    targets = json.loads(r.read())
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    url: str = pages[0]["webSocketDebuggerUrl"]
                    return url
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("chromium's DevTools endpoint never answered")
            time.sleep(0.2)

    def call(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its answer (events meanwhile are dropped)."""
        ident = next(self._ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == ident:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result

    def evaluate(self, expression: str) -> Any:
        """The value of a JS expression in the page (awaiting promises)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def wait_for(self, expression: str, what: str, timeout: float = 60.0) -> Any:
        """A bounded poll on a JS condition in the page. A page that navigates
        while the expression runs (a sign-in's redirects) answers with one of
        NAVIGATED instead of a value: not yet, ask the next page."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
            except AssertionError as error:
                if not any(sign in str(error) for sign in NAVIGATED):
                    raise
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(0.25)

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self._stack.close()
        finally:
            self._stop_process()

    def _stop_process(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        shutil.rmtree(self.profile, ignore_errors=True)


@contextlib.contextmanager
def open_browser() -> Iterator[Browser]:
    """A page in a fresh chromium for one test: skipped without chromium,
    failed instead where the run requires every part (``LEASE_TEST_REQUIRE_ALL``)."""
    binary = chromium_binary()
    if binary is None:
        message = "chromium is not installed (scripts/envs.sh ensure_browser installs it)"
        if os.environ.get("LEASE_TEST_REQUIRE_ALL") == "1":
            pytest.fail(message)
        pytest.skip(message)
    browser = Browser(binary, free_port())
    try:
        browser.call("Page.enable")
        yield browser
    finally:
        browser.close()
