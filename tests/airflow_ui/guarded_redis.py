"""A password-protected redis-server behind the Leases page, for the tests
of issue 40: the store's password (``security.leaks.PASSWORD``) is the
canary, looked for in every answer those tests read. Only the ACL user
``leaseuser`` may sign in (the default user is switched off), so the page
reaches the store only with the password."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from security.leaks import ENCODED, PASSWORD, assert_no_secret
from servers.redis_server import RedisServer

USER = "leaseuser"


@contextmanager
def guarded_redis() -> Iterator[tuple[RedisServer, str]]:
    """A started server and its URL (password percent-encoded, as a
    Connection URI carries it); stopped by PID and removed afterwards."""
    import redis

    directory = Path(tempfile.mkdtemp(prefix="lease-guarded-redis-"))
    server = RedisServer(directory)
    server.start()
    try:
        with redis.Redis(host="127.0.0.1", port=server.port) as admin:
            admin.execute_command("ACL", "SETUSER", USER, "on", f">{PASSWORD}", "~*", "&*", "+@all")
            admin.execute_command("ACL", "SETUSER", "default", "off")
        yield server, f"redis://{USER}:{ENCODED}@127.0.0.1:{server.port}/0"
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def checked(response: httpx.Response) -> httpx.Response:
    """The response, once its body and headers are seen to hold no piece of the password."""
    assert_no_secret(response.text, "\n".join(f"{k}: {v}" for k, v in response.headers.items()))
    return response


def corrupt(store: object, key: str, field: str = "expires_at", value: str = "ledger-garbage") -> None:
    """Overwrite one field of ``key``'s record with the store's own client, as
    an operator with redis-cli might: the store then reads it as ``CorruptRecord``."""
    hash_key = store._prepared(key).rec[0]  # type: ignore[attr-defined]
    store._client.hset(hash_key, field, value)  # type: ignore[attr-defined]
