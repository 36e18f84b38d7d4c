"""The failure the object-storage guard exists for: a writer that a pause
outlives.

Holder A (a process of its own, talking to S3 through a proxy) takes the
lease and commits its output. It is frozen (SIGSTOP) past its ttl; B takes
the lease (a higher token) and commits; A resumes and commits again. A gets
``StaleToken``, ``read()`` returns B's files, and nothing of A's second output
is visible. The same with A frozen at every step of its second commit: while
a file is being staged, while its manifest write is in flight, and while the
retry after a 409 is in flight (the proxy holds the request until the test
lets it through, as a slow network would). And A killed with its manifest
write in flight, which arrives after B's commit.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from objectstore_helpers import object_names

from lease_integrations import connect
from lease_integrations.core.fencing import FencedOutput, ObjectFence

WORKER = Path(__file__).with_name("fence_worker.py")
B_FILES = {"part-0.csv": b"B only"}


def read_line(proc: subprocess.Popen[str], timeout: float = 60.0) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"no line from the writer within {timeout} s"
    return proc.stdout.readline().strip()


def take_over(store_url: str, key: str, old_token: int) -> int:
    """B takes the lease once the store says A's has expired (bounded poll)."""
    with connect(store_url) as store:
        deadline = time.monotonic() + 30
        while True:
            result = store.acquire(key, "writer-B", "secret-of-B", 30.0, {})
            if result.granted:
                assert result.record is not None and result.record.token > old_token
                return result.record.token
            assert time.monotonic() < deadline, "A's lease never expired"
            time.sleep(0.1)


class WriterA:
    def __init__(self, endpoint: str, bucket_url: str, tmp_path: Path) -> None:
        self.store_url = bucket_url.rsplit("/", 1)[0] + "/leases"
        self.fence_url = bucket_url
        self.out = tmp_path / "a.json"
        env = {**os.environ, "AWS_ENDPOINT_URL": endpoint}
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), "resume", self.store_url, "billing", self.fence_url,
             str(self.out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        line = read_line(self.proc)
        assert line.startswith("committed "), line
        self.token = int(line.split()[1])

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def result(self) -> dict[str, Any]:
        assert self.proc.wait(timeout=120) == 0
        row: dict[str, Any] = json.loads(self.out.read_text())
        return row

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=10)


def assert_only_b_is_visible(url: str, a_token: int, b_token: int) -> None:
    assert ObjectFence(url).read() == FencedOutput(b_token, B_FILES)
    names = object_names(url)
    assert not [n for n in names if f"/_fence/{a_token}-" in n], names  # A's staged files deleted


#: Where A's second commit is frozen: nowhere (between commits), while its last
#: file is staged, while its manifest write is in flight, or while the retry
#: after a 409 answer is in flight.
CUTS = {
    "between commits": [],
    "while staging": [("PUT", "/part-1.csv", "hold")],
    "manifest in flight": [("PUT", "_fence/manifest.json", "hold")],
    "retry after a 409 in flight": [("PUT", "_fence/manifest.json", "conflict"),
                                    ("PUT", "_fence/manifest.json", "hold")],
}


@pytest.mark.parametrize("cut", list(CUTS))
def test_a_resumed_writer_gets_stale_token_and_leaves_nothing_visible(
    cut: str, s3_proxy_factory: Callable[..., Any], tmp_path: Path
) -> None:
    proxy, url = s3_proxy_factory()
    a = WriterA(proxy.endpoint, url, tmp_path)
    try:
        rules = [proxy.add(*rule) for rule in CUTS[cut]]
        a.go()
        if rules:
            assert rules[-1].arrived.wait(timeout=60), f"A's commit never reached {cut}"
        a.proc.send_signal(signal.SIGSTOP)
        b_token = take_over(a.store_url, "billing", a.token)
        ObjectFence(url).commit(b_token, B_FILES)
        a.proc.send_signal(signal.SIGCONT)
        if not rules:
            a.go()  # A wakes up and writes its second output
        for rule in rules:
            rule.release()
        result = a.result()
    finally:
        a.stop()
    assert result == {"token": a.token, "result": "stale", "newest": b_token}
    assert_only_b_is_visible(url, a.token, b_token)


def test_a_killed_writers_delayed_manifest_write_cannot_replace_the_new_output(
    s3_proxy_factory: Callable[..., Any], tmp_path: Path
) -> None:
    """A is SIGKILLed with its manifest write held in the network; B takes
    over and commits; then the write arrives. The store refuses it (its
    If-Match names the manifest B replaced), so B's output stays whole. A's
    staged files stay behind as orphans that no manifest names."""
    proxy, url = s3_proxy_factory()
    a = WriterA(proxy.endpoint, url, tmp_path)
    try:
        held = proxy.add("PUT", "_fence/manifest.json", "hold")
        a.go()
        assert held.arrived.wait(timeout=60)
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(timeout=10)
        b_token = take_over(a.store_url, "billing", a.token)
        ObjectFence(url).commit(b_token, B_FILES)
        held.release()
        assert held.done.wait(timeout=60)
    finally:
        a.stop()
    assert ObjectFence(url).read() == FencedOutput(b_token, B_FILES)
    orphans = [n for n in object_names(url) if f"/_fence/{a.token}-" in n]
    assert sorted(n.rsplit("/", 1)[1] for n in orphans) == ["part-0.csv", "part-1.csv"]
