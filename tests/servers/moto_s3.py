"""moto's S3 server, with PutObject's condition and write made one step.

S3 lets one of several writers that send ``If-Match`` (or ``If-None-Match:
*``) against the same version win; the others get 412 (or 409). moto checks
the condition and then writes, with nothing between them on its threaded
server: when a thread switch lands between one writer's check and its write,
a second writer with the same ETag passes the check too, and both are told
200. The bucket store's breaks and releases are such writers, and the test
suite saw a break and a release both succeed on one lease (moto 5, under a
loaded machine; with ``sys.setswitchinterval(1e-6)`` in the server, 5 of
100 rounds of 8 racing writers had two winners, 0 with this module).

The tests stand moto in for S3, so it has to keep S3's rule: this module
holds one lock over each PutObject and then runs moto's server as
``python -m moto.server`` does. ``--switch-interval`` makes thread switches
as frequent as CPython allows, for the test that shows the lock holds.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from moto.s3.responses import S3Response
from moto.server import main as moto_main

_put_object = S3Response.put_object
_one_put_at_a_time = threading.Lock()


def _put_object_checked_and_written_at_once(self: S3Response) -> Any:
    with _one_put_at_a_time:
        return _put_object(self)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--switch-interval"]:
        sys.setswitchinterval(float(argv[1]))
        argv = argv[2:]
    S3Response.put_object = _put_object_checked_and_written_at_once  # type: ignore[method-assign]
    moto_main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
