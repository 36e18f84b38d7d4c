"""Redis as production runs it, started by the test run on 127.0.0.1:

- ``redis_cluster``: three masters (``--cluster-enabled yes``) joined by
  ``redis-cli --cluster create``; ``redis_cluster_url`` is its
  ``redis+cluster://`` URL. One cluster per session.
  ``RedisClusterNodes(root, tls=True)`` is the same over TLS only (clients and
  the cluster bus), every node serving one self-signed certificate.
- ``redis_sentinel``: a primary, one replica and one sentinel watching them;
  ``redis_sentinel_url`` is its ``redis+sentinel://`` URL. One per session.
  ``RedisSentinelSet(root, tls=True)`` is the same over TLS only (clients,
  replication and the sentinel's own links), all three serving one
  self-signed certificate.

Every process is stopped by its PID at the end of the session. The bus port of
each cluster node is picked free too (``--cluster-port``), so no node assumes
port + 10000 is available.
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
from collections.abc import Iterator
from pathlib import Path

import pytest

from .redis_server import DEFAULT_BINARY, SERVER_ENV, RedisServer, free_port, make_self_signed_cert

READY_TIMEOUT = 30.0
SERVICE = "leases"


def _cli() -> str:
    server = os.environ.get(SERVER_ENV) or DEFAULT_BINARY
    beside = Path(server).with_name("redis-cli")
    return str(beside) if beside.exists() else (shutil.which("redis-cli") or "redis-cli")


def command(port: int, *args: str, timeout: float = 2.0, ca_file: Path | None = None,
            host: str = "127.0.0.1") -> str:
    """One command over a raw socket in RESP (TLS trusting ``ca_file`` if given),
    answered as text (fixture code must not depend on the code under test)."""
    parts = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    with socket.create_connection((host, port), timeout=timeout) as raw:
        sock = raw if ca_file is None else ssl.create_default_context(
            cafile=str(ca_file)).wrap_socket(raw, server_hostname="127.0.0.1")
        sock.sendall(b"".join(parts))
        reply = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
            if _complete(reply):
                break
    return reply.decode(errors="replace")


def _complete(reply: bytes) -> bool:
    if reply[:1] in (b"+", b"-", b":"):
        return reply.endswith(b"\r\n")
    if reply[:1] == b"$":
        head, _, rest = reply.partition(b"\r\n")
        size = int(head[1:])
        return size < 0 or len(rest) >= size + 2
    return reply.endswith(b"\r\n")  # arrays: good enough for the replies we read


def wait_for(predicate: object, what: str, timeout: float = READY_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():  # type: ignore[operator]
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


class RedisClusterNodes:
    """Three cluster-enabled masters with every slot assigned."""

    def __init__(self, root: Path, *, tls: bool = False, host: str = "127.0.0.1") -> None:
        """``host``: the loopback address every node listens on (``::1`` for IPv6)."""
        self.root = root
        self.host = host
        self.nodes: list[RedisServer] = []
        self.cert = make_self_signed_cert(root) if tls else None

    @property
    def addresses(self) -> list[str]:
        """``host:port`` of each node, an IPv6 host in brackets."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return [f"{host}:{n.port}" for n in self.nodes]

    @property
    def url(self) -> str:
        """``redis+cluster://``, or ``rediss+cluster://`` trusting the nodes' certificate."""
        hosts = ",".join(self.addresses)
        if self.cert is None:
            return f"redis+cluster://{hosts}"
        return f"rediss+cluster://{hosts}?ssl_ca_certs={self.cert[0]}"

    def start(self) -> None:
        for i in range(3):
            self.nodes.append(self._start_node(self.root / f"node-{i}"))
        ca_file = self.cert[0] if self.cert else None
        subprocess.run(
            [_cli(), *(("--tls", "--cacert", str(ca_file)) if ca_file else ()),
             "--cluster", "create", *(f"{self.host}:{n.port}" for n in self.nodes),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        for node in self.nodes:
            wait_for(lambda node=node: "cluster_state:ok" in command(
                node.port, "CLUSTER", "INFO", ca_file=ca_file, host=self.host),
                f"cluster node {node.port} to see the whole cluster")

    def _start_node(self, directory: Path) -> RedisServer:
        """A free port is free only when it was picked: a test running beside
        this one (or a client's ephemeral port) may take it before the node
        binds it. Picked anew a few times on "Address already in use"."""
        for attempt in range(5):
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            node = RedisServer(directory, cert=self.cert, host=self.host, extra_args=(
                "--cluster-enabled", "yes", "--cluster-config-file", str(directory / "nodes.conf"),
                "--cluster-port", str(free_port(self.host)), "--cluster-node-timeout", "5000",
                *(("--tls-cluster", "yes") if self.cert else ())))
            try:
                node.start()
                return node
            except RuntimeError as exc:
                if "Address already in use" not in str(exc) or attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


class RedisSentinelSet:
    """A primary, one replica and one sentinel (quorum 1) for service ``leases``."""

    def __init__(self, root: Path, *, tls: bool = False) -> None:
        self.root = root
        (root / "primary").mkdir()
        (root / "replica").mkdir()
        self.cert = make_self_signed_cert(root) if tls else None
        replication = ("--tls-replication", "yes") if tls else ()
        self.primary = RedisServer(root / "primary", cert=self.cert)
        self.replica = RedisServer(root / "replica", cert=self.cert, extra_args=(
            "--replicaof", "127.0.0.1", str(self.primary.port), *replication))
        self.sentinel_port = free_port()
        self.sentinel: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis+sentinel://``, or ``rediss+sentinel://`` trusting the certificate."""
        if self.cert is None:
            return f"redis+sentinel://127.0.0.1:{self.sentinel_port}/{SERVICE}/0"
        return (f"rediss+sentinel://127.0.0.1:{self.sentinel_port}/{SERVICE}/0"
                f"?ssl_ca_certs={self.cert[0]}")

    def _command(self, port: int, *args: str) -> str:
        return command(port, *args, ca_file=self.cert[0] if self.cert else None)

    def start(self) -> None:
        self.primary.start()
        self.replica.start()
        wait_for(lambda: "master_link_status:up" in self._command(
            self.replica.port, "INFO", "replication"), "the replica to sync")
        conf = self.root / "sentinel.conf"
        listen = f"port {self.sentinel_port}\n"
        if self.cert is not None:
            cert, key = self.cert
            listen = (f"port 0\ntls-port {self.sentinel_port}\ntls-cert-file {cert}\n"
                      f"tls-key-file {key}\ntls-ca-cert-file {cert}\ntls-auth-clients no\n"
                      "tls-replication yes\n")
        conf.write_text(
            f"{listen}bind 127.0.0.1\ndir {self.root}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} 1\n"
            f"sentinel down-after-milliseconds {SERVICE} 1000\n"
            f"sentinel failover-timeout {SERVICE} 10000\n")
        binary = os.environ.get(SERVER_ENV) or DEFAULT_BINARY
        with open(self.root / "sentinel.log", "ab") as log:
            self.sentinel = subprocess.Popen([binary, str(conf), "--sentinel"],
                                             stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT)
        wait_for(lambda: str(self.replica.port) in self._command(
            self.sentinel_port, "SENTINEL", "REPLICAS", SERVICE),
            "the sentinel to discover the replica")

    def master_port(self) -> int:
        reply = self._command(self.sentinel_port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return int(reply.strip().split("\r\n")[-1])

    def stop(self) -> None:
        if self.sentinel is not None and self.sentinel.poll() is None:
            self.sentinel.send_signal(signal.SIGTERM)
            try:
                self.sentinel.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.sentinel.kill()
                self.sentinel.wait(timeout=10)
        self.sentinel = None
        self.replica.stop()
        self.primary.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterNodes]:
    root = Path(tempfile.mkdtemp(prefix="lease-redis-cluster-"))
    cluster = RedisClusterNodes(root)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_cluster_url(redis_cluster: RedisClusterNodes) -> str:
    return redis_cluster.url


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[RedisSentinelSet]:
    root = Path(tempfile.mkdtemp(prefix="lease-redis-sentinel-"))
    topology = RedisSentinelSet(root)
    try:
        topology.start()
        yield topology
    finally:
        topology.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_sentinel_url(redis_sentinel: RedisSentinelSet) -> str:
    return redis_sentinel.url
