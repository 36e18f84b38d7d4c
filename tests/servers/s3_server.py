"""moto's S3 server as a process of its own on a free 127.0.0.1 port.

moto honours ``If-Match`` and ``If-None-Match`` on PutObject (since 2025) and,
started through ``moto_s3.py``, lets only one of several racing writers win
as S3 does, so it is a real conditional store for the object-storage guard
and the bucket store. The test run points boto3 at it the way a user points boto3 at any
endpoint: ``AWS_ENDPOINT_URL`` and the credential variables, set for the
session (and so inherited by the worker processes the tests start).

``s3_url`` is ``s3://<session bucket>/<fresh prefix>`` for each test;
``s3_proxy_factory`` puts a proxy (``servers/s3_proxy.py``) in front of the
server for the tests of stores that ignore conditions and of cut commits.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

START_TIMEOUT = 60.0
SESSION_BUCKET = "lease-tests"
#: What boto3 needs to reach moto; moto accepts any credentials.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _unavailable(message: str) -> None:
    if os.environ.get("LEASE_TEST_REQUIRE_ALL") == "1":
        pytest.fail(message)
    pytest.skip(message)


class S3Server:
    """moto's server (``moto_s3.py``: with S3's one winner per conditional
    write) on 127.0.0.1; stopped by its PID."""

    def __init__(self, directory: Path, switch_interval: float | None = None) -> None:
        self.directory = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.switch = ["--switch-interval", str(switch_interval)] if switch_interval else []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = open(self.directory / "moto.log", "wb")  # noqa: SIM115 - the child writes it
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("moto_s3.py")), *self.switch,
             "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.directory / "moto.log").read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"moto's S3 server did not start on {self.endpoint}:\n{tail}")
            time.sleep(0.1)

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None


def s3_client(endpoint: str) -> Any:
    """A boto3 S3 client of its own for ``endpoint`` (not the code under test)."""
    import boto3

    return boto3.session.Session().client("s3", endpoint_url=endpoint, **{
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "region_name": CREDENTIALS["AWS_DEFAULT_REGION"]})


def make_bucket(endpoint: str, bucket: str) -> None:
    """Create a bucket with boto3 directly (not through the code under test)."""
    s3_client(endpoint).create_bucket(Bucket=bucket)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    try:
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError as exc:
        _unavailable(f"no S3 test server: install the [test] extra (boto3, moto[server]): {exc}")
    directory = Path(tempfile.mkdtemp(prefix="lease-s3-"))
    server = S3Server(directory)
    saved = {name: os.environ.get(name) for name in (*CREDENTIALS, "AWS_ENDPOINT_URL")}
    try:
        server.start()
        os.environ.update(CREDENTIALS)
        os.environ["AWS_ENDPOINT_URL"] = server.endpoint
        make_bucket(server.endpoint, SESSION_BUCKET)
        yield server
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def s3_url(s3_server: S3Server) -> str:
    """A fresh prefix in the session's bucket: tests keep apart by prefix."""
    return f"s3://{SESSION_BUCKET}/t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def s3_proxy_factory(s3_server: S3Server) -> Iterator[Callable[..., object]]:
    """Proxies in front of the session's server, each with a bucket of its
    own (the probe's verdict is cached per endpoint and bucket): returns
    ``(proxy, url)``. Every proxy is stopped at the end of the test."""
    from .s3_proxy import S3Proxy

    started: list[S3Proxy] = []

    def make(**options: object) -> tuple[S3Proxy, str]:
        proxy = S3Proxy(s3_server.endpoint, **options)  # type: ignore[arg-type]
        proxy.start()
        started.append(proxy)
        bucket = f"proxied-{uuid.uuid4().hex[:12]}"
        make_bucket(s3_server.endpoint, bucket)
        return proxy, f"s3://{bucket}/out"

    yield make
    for proxy in started:
        proxy.stop()
