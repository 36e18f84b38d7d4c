"""What both smoke tests share: bounded polls and children whose output goes
to a file (a chatty orchestrator can never block on a full pipe).

The smoke tests run on the oldest and the newest supported Airflow and
Prefect, so they use nothing but the project's public names and each
orchestrator's long-standing public API."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WAIT = 180.0  # upper bound for anything a smoke test waits on (never reached when all is well)


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    """A bounded poll on something observable (a file, a process)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


class Child:
    """``python tests/smoke/<script> args...`` in its own process."""

    def __init__(self, script: str, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 - closed in result()/stop()
        self.process = subprocess.Popen([sys.executable, str(HERE / script), *args],
                                        stdout=self._out, stderr=subprocess.STDOUT, env=env)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def result(self, timeout: float = WAIT) -> dict[str, Any]:
        """The JSON of the child's last ``RESULT`` line, once it exited 0."""
        try:
            code = self.process.wait(timeout)
        finally:
            self._out.close()
        assert code == 0, f"child exited {code}:\n{self.output()[-4000:]}"
        lines = [line for line in self.output().splitlines() if line.startswith("RESULT ")]
        assert lines, f"child printed no RESULT line:\n{self.output()[-4000:]}"
        result: dict[str, Any] = json.loads(lines[-1][len("RESULT "):])
        return result

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(WAIT)
        self._out.close()
