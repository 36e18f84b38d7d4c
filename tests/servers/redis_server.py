"""Real redis-server processes for the tests, on free 127.0.0.1 ports.

`redis_url` is one session-wide server (no persistence) that every Redis test
shares; tests keep apart by using unique keys. `redis_server_factory` starts
private servers for fault tests, which stop, pause or restart them without
disturbing anyone else. Every server is stopped by its PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

SERVER_ENV = "LEASE_TEST_REDIS_SERVER"
DEFAULT_BINARY = "/usr/bin/redis-server"
START_TIMEOUT = 15.0


def free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _answers_ping(port: int, ca_file: Path | None = None, host: str = "127.0.0.1") -> bool:
    """One raw PING, so the fixture does not depend on the code under test."""
    try:
        with socket.create_connection((host, port), timeout=0.5) as raw:
            sock = raw
            if ca_file is not None:
                sock = ssl.create_default_context(cafile=str(ca_file)).wrap_socket(
                    raw, server_hostname="127.0.0.1")
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def make_self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """A throwaway certificate for 127.0.0.1 (it is its own CA)."""
    cert, key = directory / "tls-cert.pem", directory / "tls-key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key


class RedisServer:
    """One redis-server process; `stop`/`start` keep the same port and data dir,
    `pause`/`resume` freeze it with SIGSTOP/SIGCONT (a hung server, TCP kept)."""

    def __init__(self, directory: Path, *, persistent: bool = False, tls: bool = False,
                 cert: tuple[Path, Path] | None = None,
                 extra_args: tuple[str, ...] = (), host: str = "127.0.0.1") -> None:
        """``tls`` serves TLS only, with a certificate of its own; ``cert`` (certificate,
        key) serves TLS with that one instead, so several servers share one CA.
        ``host`` is the loopback address it listens on (``::1`` for IPv6 tests)."""
        self.extra_args = extra_args  # more redis-server options (cluster mode, replicaof)
        self.binary = os.environ.get(SERVER_ENV) or DEFAULT_BINARY
        if not Path(self.binary).is_file():
            raise FileNotFoundError(f"redis-server not found at {self.binary} (set ${SERVER_ENV})")
        self.directory = directory
        self.persistent = persistent
        self.host = host
        self.port = free_port(host)
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.tls_cert: Path | None = None
        self.tls_key: Path | None = None
        if cert is not None:
            self.tls_cert, self.tls_key = cert
        elif tls:
            self.tls_cert, self.tls_key = make_self_signed_cert(directory)

    @property
    def url(self) -> str:
        """redis:// URL, or for a TLS server a rediss:// URL trusting its certificate."""
        if self.tls_cert is not None:
            return f"rediss://127.0.0.1:{self.port}/0?ssl_ca_certs={self.tls_cert}"
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self.process is not None, "server not running"
        return self.process.pid

    def start(self) -> None:
        # appendfsync always: a restart must not lose an acknowledged write.
        persistence = (["--appendonly", "yes", "--appendfsync", "always"] if self.persistent
                       else ["--appendonly", "no"])
        listen = ["--port", str(self.port)]
        if self.tls_cert is not None:
            listen = ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file",
                      str(self.tls_cert), "--tls-key-file", str(self.tls_key),
                      "--tls-ca-cert-file", str(self.tls_cert), "--tls-auth-clients", "no"]
        args = [self.binary, *listen, "--bind", self.host,
                "--dir", str(self.directory), "--save", "", *persistence,
                "--daemonize", "no", "--logfile", str(self.directory / "redis.log"),
                *self.extra_args]
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + START_TIMEOUT
        while not _answers_ping(self.port, self.tls_cert, self.host):
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {err}"
                                   f"{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server on port {self.port} did not answer PING "
                                   f"within {START_TIMEOUT} s{self.log_tail()}")
            time.sleep(0.02)

    def log_tail(self) -> str:
        log = self.directory / "redis.log"
        return "\n" + "\n".join(log.read_text().splitlines()[-10:]) if log.exists() else ""

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT; a no-op when the server is not paused (safe in teardown)."""
        if self.paused and self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        """Stop this server (and only it) by PID; SIGKILL if it does not exit."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        if self.paused:
            os.kill(process.pid, signal.SIGCONT)
            self.paused = False
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL: the server dies without a chance to save anything."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        self.paused = False

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    directory = Path(tempfile.mkdtemp(prefix="lease-redis-"))
    server = RedisServer(directory)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
def redis_server_factory(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Private servers for tests that stop, pause or restart them."""
    started: list[RedisServer] = []

    def make(*, persistent: bool = False, tls: bool = False) -> RedisServer:
        directory = tmp_path / f"redis-{len(started)}"
        directory.mkdir()
        server = RedisServer(directory, persistent=persistent, tls=tls)
        started.append(server)
        server.start()
        return server

    yield make
    for server in started:
        server.stop()
