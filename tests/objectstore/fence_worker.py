"""A writer process for the object-fence tests.

``loop URL TOKEN OUT N``: commit N times with TOKEN, one JSON line per try in
OUT: {"token", "result": "ok" | "stale", "newest"}.

``resume STORE_URL KEY FENCE_URL OUT``: take the lease KEY (ttl 1 s) with the
store's own acquire, as a job whose host is about to freeze (no keeper, no
renewals: a whole paused host is the fencing token's case), commit once
(line "committed TOKEN" on stdout), wait for a line on stdin, commit again
with two files, and write the result to OUT: the holder that a pause outlives.
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


def resume(store_url: str, key: str, fence_url: str, out: str) -> None:
    from lease_integrations import connect

    with connect(store_url) as store:
        granted = store.acquire(key, "writer-A", "secret-of-A", 1.0, {}).record
    assert granted is not None, "A could not take the lease"
    fence = ObjectFence(fence_url)
    first = commit(fence, granted.token, {"part-0.csv": b"A first"})
    print(f"committed {granted.token}" if first["result"] == "ok" else f"failed {first}", flush=True)
    sys.stdin.readline()
    second = commit(fence, granted.token, {"part-0.csv": b"A second", "part-1.csv": b"A second"})
    with open(out, "w") as log:
        log.write(json.dumps(second) + "\n")


def main() -> None:
    if sys.argv[1] == "resume":
        resume(*sys.argv[2:6])
        return
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
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
