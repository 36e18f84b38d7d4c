"""``probe``: does this object store honour the conditional writes that its
leases and fenced outputs rely on? (gs:// too: GCS is only probed, see
``core.fencing.gcs``.)

It runs the same probe ``connect()`` and ``ObjectFence`` run before their
first write (``core.fencing.probe``): a scratch object under the URL's
prefix, a second ``If-None-Match: *`` and a stale ``If-Match`` on it, each of
which the store must refuse. The console runs it apart from ``connect()``
(which would refuse the very store it is asked to judge) and prints each
condition with its verdict; exit 8 names the conditions the store ignored.
"""

from __future__ import annotations

import argparse

from ..core.config import mask_url, resolve_url
from ..core.errors import ConfigurationError
from ..core.fencing.gcs import GcsBucket
from ..core.fencing.probe import AnyBucket, conditions_of, probe
from ..core.fencing.s3 import Bucket, parse_place
from . import exits
from .render import emit, emit_json

OBJECT_SCHEMES = ("s3", "gs")


def run_probe(args: argparse.Namespace) -> int:
    url = resolve_url(args.url)
    if url.partition("://")[0].lower() not in OBJECT_SCHEMES:
        raise ConfigurationError(
            f"probe checks object stores (s3:// or gs://bucket/prefix), not {mask_url(url)!r}: the other "
            "stores decide their conditional writes in their own server")
    place = parse_place(url, "store URL", schemes=OBJECT_SCHEMES)
    bucket: AnyBucket = GcsBucket(place) if place.scheme == "gs" else Bucket(place)
    verdict = probe(bucket)
    checked = conditions_of(bucket)[:2]
    if getattr(args, "json", False):
        emit_json({"store": verdict.store, "honoured": verdict.honoured,
                   "conditions": {c: c not in verdict.ignored for c in (*checked, *verdict.ignored)}})
    else:
        emit(f"store: {verdict.store}")
        for condition in dict.fromkeys((*checked, *verdict.ignored)):
            emit(f"  {'IGNORED ' if condition in verdict.ignored else 'honoured'}  {condition}")
    if verdict.honoured:
        return exits.OK
    raise exits.CommandFailed(
        f"{verdict.store} ignores {', '.join(verdict.ignored)}: it cannot keep leases or fence "
        "outputs", exits.CONDITION_IGNORED)
