"""Object storage: what the bucket store and the fenced output cost, against
the plain operations on the same server.

``python benchmarks/object_store.py [--quick] [--runs N]`` starts moto's S3
server on 127.0.0.1 (its own process, stopped by PID at the end) and runs,
interleaved run by run so a busy host slows every side alike:

- one conditional PUT (``If-None-Match: *``, a fresh name each), the floor
  of every lease operation, against the bucket store's acquire and its
  release (each a read and a conditional write, plus a nonce and the
  history in the body);
- a plain upload of the same files (one PUT each) against a fenced commit
  of them (a manifest read, the staging PUTs, one conditional manifest PUT,
  the replaced output's deletes).

Figures are medians of the runs; ratios are to the baseline of the same run.
moto is an emulator in Python: the absolute times say nothing of S3, the
ratios say how many of its round trips each operation makes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BUCKET = "bench"
FILES = 4
FILE_BYTES = 64 * 1024


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_moto(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _port()
    endpoint = f"http://127.0.0.1:{port}"
    with open(directory / "moto.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                 "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(endpoint + "/moto-api/", timeout=1).close()
            return proc, endpoint
        except urllib.error.HTTPError:
            return proc, endpoint
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                tail = (directory / "moto.log").read_text()[-500:]
                raise RuntimeError(f"moto did not start: {tail}") from None
            time.sleep(0.1)


def per_op_us(op: Callable[[], None], count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        op()
    return (time.perf_counter() - start) / count * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=None)
    args = parser.parse_args(argv)
    runs = args.runs or (3 if args.quick else 9)
    ops = 10 if args.quick else 40
    directory = Path(tempfile.mkdtemp(prefix="bench-s3-"))
    proc, endpoint = start_moto(directory)
    try:
        os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench",
                           "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"})
        import boto3

        from lease_integrations import connect
        from lease_integrations.core.fencing import ObjectFence

        client = boto3.session.Session().client("s3")
        client.create_bucket(Bucket=BUCKET)
        store = connect(f"s3://{BUCKET}/leases")
        fence = ObjectFence(f"s3://{BUCKET}/fenced")
        files = {f"part-{i}.csv": os.urandom(FILE_BYTES) for i in range(FILES)}
        token = [0]

        def conditional_put() -> None:
            client.put_object(Bucket=BUCKET, Key=f"floor/{uuid.uuid4().hex}", Body=b"x" * 300,
                              IfNoneMatch="*")

        acquire_us: list[float] = []
        release_us: list[float] = []

        def cycle() -> None:
            t0 = time.perf_counter()
            record = store.acquire("bench-key", "bench", "bench-secret", 30.0, {"host": "b"}).record
            t1 = time.perf_counter()
            assert record is not None
            store.release("bench-key", "bench-secret", record.token)
            acquire_us.append((t1 - t0) * 1e6)
            release_us.append((time.perf_counter() - t1) * 1e6)

        def plain_upload() -> None:
            prefix = uuid.uuid4().hex
            for name, data in files.items():
                client.put_object(Bucket=BUCKET, Key=f"plain/{prefix}/{name}", Body=data)

        def fenced_commit() -> None:
            token[0] += 1
            fence.commit(token[0], files)

        rows: dict[str, list[float]] = {k: [] for k in ("put", "cycle", "acq", "rel", "plain", "fenced")}
        for run in range(runs):
            print(f"[object store] run {run + 1}/{runs}", file=sys.stderr, flush=True)
            rows["put"].append(per_op_us(conditional_put, ops))
            acquire_us.clear()
            release_us.clear()
            rows["cycle"].append(per_op_us(cycle, ops))
            rows["acq"].append(statistics.median(acquire_us))
            rows["rel"].append(statistics.median(release_us))
            rows["plain"].append(per_op_us(plain_upload, max(3, ops // 4)))
            rows["fenced"].append(per_op_us(fenced_commit, max(3, ops // 4)))
        store.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(directory, ignore_errors=True)

    def ratios(name: str, base: str) -> str:
        each = [a / b for a, b in zip(rows[name], rows[base])]
        return f"{statistics.median(each):.2f}x ({min(each):.2f}-{max(each):.2f})"

    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"Object storage on moto's S3 server: medians of {runs} interleaved runs, {ops} ops each")
    print(f"{'operation':<44}{'us/op':>10}  vs baseline (min-max over runs)")
    print(f"{'one conditional PUT (If-None-Match: *)':<44}{med['put']:>10,.0f}  baseline")
    print(f"{'bucket store acquire':<44}{med['acq']:>10,.0f}  {ratios('acq', 'put')}")
    print(f"{'bucket store release':<44}{med['rel']:>10,.0f}  {ratios('rel', 'put')}")
    print(f"{'bucket store acquire + release':<44}{med['cycle']:>10,.0f}  {ratios('cycle', 'put')}")
    plain = f"plain upload of {FILES} files x {FILE_BYTES // 1024} KiB"
    print(f"{plain:<44}{med['plain']:>10,.0f}  baseline")
    print(f"{'fenced commit of the same files':<44}{med['fenced']:>10,.0f}  {ratios('fenced', 'plain')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
