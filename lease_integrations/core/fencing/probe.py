"""The conformance probe: does this object store honour the conditions we
trust it with?

Stores and emulators often accept ``If-None-Match`` and ``If-Match`` and
ignore them (docs: Fencing object storage). A writer that trusts such a
store fences nothing and two lease holders both "win", silently. So before
the first lease or output is written to a bucket, this writes a scratch
object under the prefix and checks that the store refuses a second
``If-None-Match: *`` and a stale ``If-Match``, and that a refused write left
the object as it was. Once per bucket (endpoint and name) and process: the
verdict is a property of the store, not of a call.
"""

from __future__ import annotations

import threading
import uuid
from contextlib import suppress
from dataclasses import dataclass

from ..errors import ConditionIgnored
from .gcs import LARGE_UPLOAD, GcsBucket
from .s3 import Bucket, Refused

AnyBucket = Bucket | GcsBucket

#: The conditions the probe checks, as the messages name them (S3, then GCS).
IF_NONE_MATCH = "If-None-Match: * (a second create of one name)"
IF_MATCH = "If-Match (a stale ETag)"
IF_MATCH_CURRENT = "If-Match (the current ETag was refused)"
GENERATION_ZERO = "ifGenerationMatch=0 (a second create of one name)"
GENERATION_STALE = "ifGenerationMatch (a stale generation)"
GENERATION_CURRENT = "ifGenerationMatch (the current generation was refused)"
GENERATION_RESUMABLE = "ifGenerationMatch on an upload over 8 MiB (resumable; a stale generation)"


def conditions_of(bucket: AnyBucket) -> tuple[str, str, str]:
    """The names of the create, stale and current conditions on this store."""
    if bucket.place.scheme == "gs":
        return GENERATION_ZERO, GENERATION_STALE, GENERATION_CURRENT
    return IF_NONE_MATCH, IF_MATCH, IF_MATCH_CURRENT

_lock = threading.Lock()
_verdicts: dict[tuple[str, str], Verdict] = {}


@dataclass(frozen=True)
class Verdict:
    """What the probe found: the store as named in messages, and each
    condition it ignored (empty: it honours them all)."""

    store: str
    ignored: tuple[str, ...]

    @property
    def honoured(self) -> bool:
        return not self.ignored


def probe(bucket: AnyBucket) -> Verdict:
    """Write a scratch object and try each condition on it; delete it after.
    Raises ``StoreUnavailable`` when the store cannot be asked. (Also takes
    ``gcs.GcsBucket``: the same calls, generations for ETags.)"""
    create, stale_cond, current_cond = conditions_of(bucket)
    name = f"{bucket.place.prefix}_probe/{uuid.uuid4().hex}"
    ignored: list[str] = []
    nonce = uuid.uuid4().hex.encode()
    try:
        first, _ = bucket.put(name, b"probe-1 " + nonce, if_none_match=True)
        try:
            bucket.put(name, b"probe-2 " + nonce, if_none_match=True)
            ignored.append(create)
        except Refused:
            pass
        current = bucket.get(name)
        if current is None:  # a store that loses a fresh object cannot keep a lease either
            return Verdict(describe(bucket), (create,))
        try:
            latest, _ = bucket.put(name, b"probe-3 " + nonce, if_match=current.etag)
        except Refused:
            return Verdict(describe(bucket), (*ignored, current_cond))
        stale = first if first != latest else current.etag
        try:
            bucket.put(name, b"probe-4 " + nonce, if_match=stale)
            ignored.append(stale_cond)
        except Refused:
            after = bucket.get(name)
            if after is None or after.body != b"probe-3 " + nonce:
                ignored.append(stale_cond)  # said no, wrote anyway
        if isinstance(bucket, GcsBucket):  # large objects go up in resumable sessions
            try:
                bucket.put(name, b"probe-5 " + nonce + bytes(LARGE_UPLOAD), if_match=stale)
                ignored.append(GENERATION_RESUMABLE)
            except Refused:
                pass
    finally:
        with suppress(Exception):  # best effort: a scratch object left costs bytes only
            bucket.delete(name)
    return Verdict(describe(bucket), tuple(ignored))


def verdict(bucket: AnyBucket) -> Verdict:
    """The probe's verdict on this bucket, probed at most once per process."""
    with _lock:
        found = _verdicts.get(bucket.identity)
        if found is None:
            found = _verdicts[bucket.identity] = probe(bucket)
        return found


def require_conditions(bucket: AnyBucket) -> None:
    """Raise ``ConditionIgnored`` (naming the store and each condition) when
    the bucket's store ignores a condition; probe it first if not yet."""
    found = verdict(bucket)
    if not found.honoured:
        raise ConditionIgnored(found.store, found.ignored)


def describe(bucket: AnyBucket) -> str:
    """The store as a message names it: the bucket URL and the endpoint."""
    return f"{bucket.place.url} (endpoint {bucket.endpoint})"
