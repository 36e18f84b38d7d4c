"""The object-storage guard: a job's output published for its token, all or
nothing, on S3.

``ObjectFence("s3://bucket/exports/billing").commit(lease.token, files)``

One conditional PUT guards one object, and an output is many objects. So the
files are staged under a name of their own (``_fence/<token>-<commit>/``),
then published by one conditional write of a manifest
(``_fence/manifest.json``) whose body names the token, the commit and each
staged object with its ETag. Readers follow the manifest (``read()``), so
they see the whole of one commit or the whole of the one before it, never a
half output.

The order of events that makes it a fence:

1. read the manifest: its ETag, and the token in its body (an ETag is a hash,
   not an order, so the token lives in the body). A newer token there:
   ``StaleToken`` before anything is written;
2. stage the files;
3. write the manifest with ``If-Match`` on the ETag read in 1 (``If-None-Match:
   *`` for the first). Anyone's write in between (a newer holder's commit)
   changes the ETag and the store refuses ours;
4. refused (412), in conflict (409) or unanswered (a timeout): read the
   manifest again. Our own commit id there: an earlier try landed, done. A
   newer token: ``StaleToken``, and our staged files are deleted. Otherwise
   (our token or older) go to 3 with the new ETag.

An equal token may commit again: one holder writes many times. The store
must honour the conditions: the first commit to a bucket in a process runs
the probe (``core.fencing.probe``) and refuses a store that ignores them.
Endpoint and credentials: as boto3 takes them (``core.fencing.s3``).
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Mapping
from contextlib import suppress
from typing import IO, Any, NamedTuple

from ..backoff import Backoff
from ..errors import ConfigurationError, CorruptRecord, LeaseError, StaleToken, StoreUnavailable
from .probe import require_conditions
from .s3 import Bucket, Place, Refused, Stored, parse_place

#: Under the fence's prefix: the manifest and every commit's staged files.
FENCE_DIR = "_fence/"
MANIFEST = FENCE_DIR + "manifest.json"
#: Publish and read attempts before giving up with ``StoreUnavailable``.
ATTEMPTS = 12

FileData = bytes | bytearray | memoryview | IO[bytes]


class FencedOutput(NamedTuple):
    """What ``read()`` returns: the token that committed it and the files
    (relative name -> bytes)."""

    token: int
    files: dict[str, bytes]


class _Manifest(NamedTuple):
    token: int
    commit: str
    objects: dict[str, tuple[str, str]]  # relative name -> (object name, ETag)


class ObjectFence:
    """Publishes files under ``s3://bucket/prefix`` for a fencing token, all or
    nothing, and never lets an older token replace a newer one."""

    def __init__(self, url: str) -> None:
        self.place: Place = parse_place(url, "ObjectFence URL")
        self.url = self.place.url
        self._bucket = Bucket(self.place)

    def __repr__(self) -> str:
        return f"ObjectFence({self.url!r})"

    @property
    def manifest_name(self) -> str:
        """The manifest's object name: what a reader outside Python follows."""
        return self.place.prefix + MANIFEST

    def commit(self, token: int, files: Mapping[str, FileData]) -> None:
        """Publish ``files`` (relative name -> bytes or a binary file object)
        as the output of ``token``. Raises ``StaleToken`` when a newer token
        has committed (before or during this call; nothing of this call is
        then visible), ``ConditionIgnored`` for a store that ignores
        conditional writes, ``StoreUnavailable`` when the store could not be
        asked (the output is then the previous one, or, if a try landed
        unseen, this one: ``read()`` says which)."""
        _check_token(token)
        staged_files = _check_files(files)
        require_conditions(self._bucket)
        current = self._bucket.get(self.manifest_name)
        seen = self._parse(current)
        if seen is not None and seen.token > token:
            raise StaleToken(self.url, token, seen.token)
        commit = uuid.uuid4().hex
        directory = f"{self.place.prefix}{FENCE_DIR}{token}-{commit}/"
        objects: dict[str, tuple[str, str]] = {}
        try:
            for name, data in staged_files.items():
                etag, _ = self._bucket.put(directory + name, data)
                objects[name] = (directory + name, etag)
            self._publish(token, commit, objects, current)
        except StaleToken:
            self._delete(name for name, _ in objects.values())
            raise
        if seen is not None and seen.commit != commit:
            self._delete(name for name, _ in seen.objects.values())  # the replaced output

    def read(self) -> FencedOutput | None:
        """The committed output, or None when nothing was committed yet. A
        commit that lands while reading is followed: the files returned are
        all of one commit."""
        last_etag = None
        for _ in range(ATTEMPTS):
            stored = self._bucket.get(self.manifest_name)
            manifest = self._parse(stored)
            if stored is None or manifest is None:
                return None
            files: dict[str, bytes] = {}
            try:
                for name, (object_name, etag) in manifest.objects.items():
                    got = self._bucket.get(object_name, if_match=etag)
                    if got is None:
                        raise Refused(404, "the staged object is gone")
                    files[name] = got.body
            except Refused:
                if stored.etag == last_etag:  # the same manifest twice, a file still missing
                    raise LeaseError(f"the output committed at {self.url} by token "
                                     f"{manifest.token} is damaged: an object its manifest "
                                     "names is missing or was overwritten") from None
                last_etag = stored.etag
                continue  # a newer commit replaced it while we read: follow the new manifest
            return FencedOutput(manifest.token, files)
        raise StoreUnavailable(f"the output at {self.url} kept changing while it was read "
                               f"({ATTEMPTS} attempts)")

    # -- steps -------------------------------------------------------------------
    def _publish(self, token: int, commit: str, objects: dict[str, tuple[str, str]],
                 current: Stored | None) -> None:
        body = json.dumps({
            "format": 1, "token": token, "commit": commit,
            "files": {name: {"object": obj, "etag": etag} for name, (obj, etag) in objects.items()},
            "writer": {"host": socket.gethostname(), "pid": os.getpid()},
        }, sort_keys=True).encode()
        etag = current.etag if current is not None else None
        backoff = Backoff(base=0.05, cap=1.0)
        failure: Exception | None = None
        for _ in range(ATTEMPTS):
            try:
                self._bucket.put(self.manifest_name, body, if_match=etag,
                                 if_none_match=etag is None)
                return
            except (Refused, StoreUnavailable) as exc:
                failure = exc
            try:
                now = self._bucket.get(self.manifest_name)
            except StoreUnavailable as exc:
                failure = exc
                time.sleep(backoff.next_delay())
                continue
            seen = self._parse(now)
            if seen is not None and seen.commit == commit:
                return  # a try we could not hear back from landed
            if seen is not None and seen.token > token:
                raise StaleToken(self.url, token, seen.token)
            etag = now.etag if now is not None else None
            if isinstance(failure, StoreUnavailable) or getattr(failure, "status", 0) == 409:
                time.sleep(backoff.next_delay())
        raise StoreUnavailable(f"could not publish the output of token {token} at {self.url} "
                               f"after {ATTEMPTS} attempts: {failure}")

    def _parse(self, stored: Stored | None) -> _Manifest | None:
        if stored is None:
            return None
        try:
            data = json.loads(stored.body)
            token = data["token"]
            if isinstance(token, bool) or not isinstance(token, int):
                raise TypeError("the token is not an integer")
            objects = {str(name): (str(entry["object"]), str(entry["etag"]))
                       for name, entry in data["files"].items()}
            return _Manifest(token, str(data["commit"]), objects)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise CorruptRecord(self.url, "manifest", f"{type(exc).__name__}: {exc}") from None

    def _delete(self, names: Any) -> None:
        for name in list(names):
            with suppress(LeaseError):  # best effort: an unreferenced object is never read
                self._bucket.delete(name)


def _check_token(token: object) -> None:
    if isinstance(token, bool) or not isinstance(token, int) or token < 1:
        raise ConfigurationError(f"fencing token must be a positive integer, got {token!r}")


def _check_files(files: object) -> dict[str, bytes | IO[bytes]]:
    """The files as a dict, every name and value checked before any write."""
    if not isinstance(files, Mapping) or not files:
        raise ConfigurationError("files must be a non-empty mapping of relative names to bytes "
                                 f"or binary file objects, got {type(files).__name__}")
    checked: dict[str, bytes | IO[bytes]] = {}
    for name, data in files.items():
        if not isinstance(name, str) or not name or len(name) > 512 or name.startswith("/") \
                or any(part in ("", ".", "..") for part in name.split("/")) \
                or any(ord(c) < 32 for c in name):
            raise ConfigurationError(
                f"file name {name!r} must be a relative path of names separated by single '/' "
                "(no '.', '..', leading '/' or control characters; at most 512 characters)")
        if isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        if not isinstance(data, bytes) and not callable(getattr(data, "read", None)):
            raise ConfigurationError(
                f"file {name!r}: expected bytes or a binary file object, got {type(data).__name__}")
        checked[name] = data
    return checked
