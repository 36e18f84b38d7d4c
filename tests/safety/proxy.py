"""A TCP proxy for fault tests, listening on 127.0.0.1: it forwards to a real
server and can add delay, black-hole traffic (connections stay open, nothing
passes: a partition) or cut every connection (a reset)."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time


class FaultProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self.delay = 0.0
        self._blackhole = threading.Event()
        self._closing = threading.Event()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True, name="fault-proxy")
        self._thread.start()

    # -- faults -------------------------------------------------------------------
    def blackhole(self, on: bool = True) -> None:
        """Stop forwarding (both ways, and for new connections) without closing."""
        if on:
            self._blackhole.set()
        else:
            self._blackhole.clear()

    def cut(self) -> None:
        """Close every open connection, as a reset would."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()

    def close(self) -> None:
        self._closing.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut()

    # -- plumbing ---------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        while self._blackhole.is_set() and not self._closing.is_set():
            time.sleep(0.01)  # a partition: the connection opens but nothing passes
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        with self._lock:
            self._pairs.append((client, upstream))
        peers = {client: upstream, upstream: client}
        try:
            while not self._closing.is_set():
                readable, _, _ = select.select(list(peers), [], [], 0.05)
                for src in readable:
                    data = src.recv(65536)
                    if not data:
                        return
                    while self._blackhole.is_set() and not self._closing.is_set():
                        time.sleep(0.01)
                    if self.delay:
                        time.sleep(self.delay)
                    peers[src].sendall(data)
        except (OSError, ValueError):  # ValueError: cut() closed a socket (fileno -1)
            return
        finally:
            for s in (client, upstream):
                with contextlib.suppress(OSError):
                    s.close()
