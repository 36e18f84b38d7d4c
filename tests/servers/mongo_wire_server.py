"""Runs mongoeco's MongoDB-wire server (under Python >= 3.13, in .venv-mongo) for
the test session: ``python mongo_wire_server.py PORT [SQLITE_PATH]``; with
``$LEASE_TEST_MONGO_AUTH=user:password`` clients must authenticate (SCRAM).

Prints ``ready`` once it listens, and serves until SIGTERM/SIGINT. It is not
mongod: see docs/development.md for the differences that matter to leases.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys


async def main(port: int, path: str | None) -> None:
    from mongoeco.engines.memory import MemoryEngine
    from mongoeco.engines.sqlite import SQLiteEngine
    from mongoeco.wire.auth import WireAuthUser
    from mongoeco.wire.proxy import AsyncMongoEcoProxyServer

    engine = SQLiteEngine(path) if path else MemoryEngine()
    users: tuple[WireAuthUser, ...] = ()
    auth = os.environ.get("LEASE_TEST_MONGO_AUTH")
    if auth:
        name, _, password = auth.partition(":")
        users = (WireAuthUser(name, password, roles=({"role": "root", "db": "admin"},)),)
    server = AsyncMongoEcoProxyServer(engine=engine, host="127.0.0.1", port=port,
                                      auth_users=users)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    print("ready", flush=True)
    try:
        await stop.wait()
    finally:
        await server.close()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None))
