"""An HTTP proxy in front of the S3 test server, for what a real store or a
real network does that moto does not: ignore conditional headers (as several
S3-compatible stores do), answer 409 ``ConditionalRequestConflict``, lose an
answer after the write landed, or hold a request in flight while the test
pauses or kills the writer and lets another commit.

Runs in the test's process (a thread per connection) on 127.0.0.1; the
writer under test talks to it through ``AWS_ENDPOINT_URL``. A rule matches a
method and a piece of the path, a number of times, and says what to do:

- ``conflict``: answer 409 without forwarding (the write never happened);
- ``lose``: forward, then close the connection without an answer (the
  write happened, the writer cannot tell);
- ``hold``: wait until the test calls ``release()``, then forward (a
  request delayed in the network; the writer may be dead by then).
"""

from __future__ import annotations

import http.client
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

CONDITIONAL = ("if-match", "if-none-match")
HOP_BY_HOP = ("connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
              "proxy-connection")

CONFLICT_BODY = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>ConditionalRequestConflict'
                 b'</Code><Message>A conflicting operation occurred.</Message></Error>')


@dataclass
class Rule:
    method: str
    path_contains: str
    action: str  # conflict | lose | hold
    times: int = 1
    matched: int = 0
    arrived: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        self.released.set()


class S3Proxy:
    def __init__(self, upstream: str, *, drop_conditions: bool = False) -> None:
        parts = urlsplit(upstream)
        self.upstream_url = upstream
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.drop_conditions = drop_conditions
        self.rules: list[Rule] = []
        self.seen: list[tuple[str, str]] = []  # (method, path) of every request
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def add(self, method: str, path_contains: str, action: str, times: int = 1) -> Rule:
        rule = Rule(method, path_contains, action, times)
        with self._lock:
            self.rules.append(rule)
        return rule

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        with self._lock:
            for rule in self.rules:
                rule.released.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def _rule(self, method: str, path: str) -> Rule | None:
        with self._lock:
            self.seen.append((method, path))
            for rule in self.rules:
                if rule.method == method and rule.path_contains in path and rule.matched < rule.times:
                    rule.matched += 1
                    return rule
        return None

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        body = _read_body(handler)
        method, path = handler.command, handler.path
        rule = self._rule(method, path)
        if rule is not None:
            rule.arrived.set()
        try:
            if rule is not None and rule.action == "conflict":
                _answer(handler, 409, [("Content-Type", "application/xml")], CONFLICT_BODY)
                return
            if rule is not None and rule.action == "hold":
                rule.released.wait(timeout=120)
            headers = [(k, v) for k, v in handler.headers.items()
                       if k.lower() not in HOP_BY_HOP
                       and not (self.drop_conditions and k.lower() in CONDITIONAL)]
            status, reply_headers, reply = self._forward(method, path, headers, body)
            if rule is not None and rule.action == "lose":
                handler.close_connection = True
                handler.connection.close()
                return
            _answer(handler, status, reply_headers, reply, head=method == "HEAD")
        except OSError:
            pass  # the writer is gone (killed while its request was held)
        finally:
            if rule is not None:
                rule.done.set()

    def _forward(self, method: str, path: str, headers: list[tuple[str, str]],
                 body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(*self.upstream, timeout=30)
        try:
            connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                if name.lower() != "content-length":
                    connection.putheader(name, value)
            connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body)
            response = connection.getresponse()
            reply = response.read()
            return response.status, [(k, v) for k, v in response.getheaders()
                                      if k.lower() not in HOP_BY_HOP
                                      and k.lower() != "content-length"], reply
        finally:
            connection.close()


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


def _answer(handler: BaseHTTPRequestHandler, status: int, headers: list[tuple[str, str]],
            body: bytes, head: bool = False) -> None:
    handler.send_response_only(status)
    for name, value in headers:
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    if not head:
        handler.wfile.write(body)
    handler.wfile.flush()
