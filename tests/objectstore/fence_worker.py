"""A writer process for the object-fence tests.

``loop URL TOKEN OUT N``: commit N times with TOKEN, one JSON line per try in
OUT: {"token", "result": "ok" | "stale", "newest"}.

``resume URL TOKEN OUT``: commit once (line "committed 1" on stdout), wait
for a line on stdin, commit again with two files, write the result to OUT:
the holder that a pause outlives.
"""

from __future__ import annotations

import json
import sys

from lease_integrations.core.errors import StaleToken
from lease_integrations.core.fencing import ObjectFence


def commit(fence: ObjectFence, token: int, files: dict[str, bytes]) -> dict[str, object]:
    try:
        fence.commit(token, files)
        return {"token": token, "result": "ok"}
    except StaleToken as exc:
        return {"token": token, "result": "stale", "newest": exc.newest}


def main() -> None:
    mode, url, token_text, out = sys.argv[1:5]
    token = int(token_text)
    fence = ObjectFence(url)
    if mode == "loop":
        body = f"token {token}".encode()
        with open(out, "a") as log:
            for _ in range(int(sys.argv[5])):
                row = commit(fence, token, {"part-0.csv": body, "part-1.csv": body})
                log.write(json.dumps(row) + "\n")
                log.flush()
        return
    if mode == "resume":
        first = commit(fence, token, {"part-0.csv": b"A first"})
        print("committed 1" if first["result"] == "ok" else f"failed {first}", flush=True)
        sys.stdin.readline()
        second = commit(fence, token, {"part-0.csv": b"A second", "part-1.csv": b"A second"})
        with open(out, "w") as log:
            log.write(json.dumps(second) + "\n")
        return
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
