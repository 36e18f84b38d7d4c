"""Runs as its own process (no threads, so forking is safe): for each round,
fork ``openers`` children that wait on one pipe and then open a SqliteStore
on the same new file at once. Prints one JSON line: the errors seen."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def round_of_openers(path: Path, openers: int) -> list[str]:
    from lease_integrations.stores.sqlite import SqliteStore

    go_read, go_write = os.pipe()
    report_read, report_write = os.pipe()
    children = []
    for _ in range(openers):
        pid = os.fork()
        if pid == 0:
            os.close(go_write)
            os.read(go_read, 1)  # every child blocks here until the parent closes the pipe
            try:
                SqliteStore(path).close()
                message = b"ok\n"
            except Exception as exc:
                message = f"{type(exc).__name__}: {exc}\n".encode()
            os.write(report_write, message)
            os._exit(0)
        children.append(pid)
    os.close(go_read)
    os.close(report_write)
    os.close(go_write)  # all children wake together
    with os.fdopen(report_read) as reports:
        lines = reports.read().splitlines()
    for pid in children:
        os.waitpid(pid, 0)
    return [line for line in lines if line != "ok"]


def main() -> None:
    directory, rounds, openers = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    errors: list[str] = []
    for i in range(rounds):
        errors += round_of_openers(directory / f"round-{i}.db", openers)
    print(json.dumps(errors))


if __name__ == "__main__":
    main()
