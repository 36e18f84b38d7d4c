"""The S3 calls the object-storage guard, the bucket store and the probe share:
one object read, one conditional write, a listing, a delete.

Why a layer of its own: each caller needs the same three answers from a
write, and boto3 spells them as exceptions with codes. ``Refused`` is the
store saying no to a condition (412, or 409 "ConditionalRequestConflict"
when two conditional writes race); ``StoreUnavailable`` is "could not tell"
(a timeout, a dropped connection, a 5xx). A caller retries the second and
re-reads after the first; it never treats "could not tell" as "not written".

Endpoint, region and credentials come the way boto3 takes them
(``AWS_ENDPOINT_URL`` or ``AWS_ENDPOINT_URL_S3``, ``AWS_DEFAULT_REGION``, the
credential chain), never from the URL: ``s3://bucket/prefix`` names a place,
not a way in, so the URL can be printed and logged as it is. boto3 is
imported only here, when the first bucket is opened.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import IO, Any
from urllib.parse import urlsplit

from ..errors import ConfigurationError, StoreUnavailable
from ..redact import mask_url

#: How long one call may take before it counts as "could not tell".
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 15.0
_BUCKET_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-.")


class Refused(Exception):
    """The store refused a conditional write: the object is not what the
    writer assumed (412), or another conditional write to it was in flight
    (409). Either way: read again, then decide."""

    def __init__(self, status: int, condition: str) -> None:
        super().__init__(f"HTTP {status}: condition {condition} not met")
        self.status = status
        self.condition = condition


@dataclass(frozen=True)
class Place:
    """``s3://bucket/prefix`` split: a bucket and a prefix ending in ``/``
    (or empty)."""

    scheme: str
    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.prefix}".rstrip("/")


def parse_place(url: str, what: str = "URL", schemes: tuple[str, ...] = ("s3",)) -> Place:
    """Check an object-store URL before any work: a scheme we serve (gs:// is
    only probed), a bucket name, no credentials, no query (endpoint and
    credentials come from the client's own configuration)."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(f"{what} must look like s3://bucket/prefix, got {url!r}")
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in ("s3", "gs"):
        raise ConfigurationError(f"{what} {_shown(url)!r}: the scheme must be s3:// (got {scheme}://)")
    if scheme == "gs" and "gs" not in schemes:
        raise ConfigurationError(
            f"{what} {_shown(url)!r}: gs:// is not supported: the only GCS emulator at hand "
            "ignores preconditions on large uploads, so none could be tested (docs: Fencing "
            "object storage; leasectl probe --url gs://... checks a GCS store); use s3://")
    if "@" in parts.netloc:
        raise ConfigurationError(
            f"{what} {_shown(url)!r} carries credentials: give them the way boto3 takes them "
            "(environment, shared config, instance role), never in the URL")
    if parts.query or parts.fragment:
        raise ConfigurationError(
            f"{what} {_shown(url)!r} has a query or fragment (not shown): s3:// URLs take no "
            "options; the "
            "endpoint comes from AWS_ENDPOINT_URL, credentials from boto3's credential chain")
    bucket = parts.netloc
    if not (3 <= len(bucket) <= (222 if scheme == "gs" else 63)) or not set(bucket) <= _BUCKET_CHARS \
            or not bucket[0].isalnum() or not bucket[-1].isalnum():
        raise ConfigurationError(
            f"{what} {_shown(url)!r}: {bucket!r} is not an S3 bucket name (3 to 63 characters: "
            "lower-case letters, digits, '-' and '.')")
    prefix = parts.path.strip("/")
    if any(piece in ("", ".", "..") for piece in prefix.split("/")) and prefix:
        raise ConfigurationError(
            f"{what} {_shown(url)!r}: the prefix must be names separated by single '/' "
            "(no empty, '.' or '..' parts)")
    return Place(scheme, bucket, f"{prefix}/" if prefix else "")


def _shown(url: object) -> str:
    """A URL for an error message: the user-info part, the query and the
    fragment dropped whole (any of them may hold a secret)."""
    text = str(url).split("?", 1)[0].split("#", 1)[0]
    head, sep, rest = text.partition("://")
    if sep and "@" in rest.split("/", 1)[0]:
        rest = "***@" + rest.split("@", 1)[1]
    return f"{head}{sep}{rest}"[:300]


@dataclass(frozen=True)
class Stored:
    """One object as read: its bytes, its ETag (the version a conditional
    write names) and the store's own times (``Last-Modified`` of the
    object, ``Date`` of the answer; whole seconds on S3)."""

    body: bytes
    etag: str
    modified: datetime
    date: datetime


class Bucket:
    """A boto3 client on one bucket. Thread-safe (boto3 clients are)."""

    def __init__(self, place: Place) -> None:
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:
            raise ConfigurationError(
                f"{place.url} needs boto3: pip install -e '<checkout>[s3]' ({exc})") from None
        self.place = place
        config = Config(connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT,
                        retries={"mode": "standard", "max_attempts": 3},
                        s3={"addressing_style": "path"} if _custom_endpoint() else None)
        self._client: Any = boto3.session.Session().client("s3", config=config)
        # Masked: an endpoint URL may carry user-info, and messages print it.
        self.endpoint: str = mask_url(str(self._client.meta.endpoint_url))

    @property
    def identity(self) -> tuple[str, str]:
        """What makes two Bucket objects the same bucket (the probe's cache key)."""
        return (self.endpoint, self.place.bucket)

    def close(self) -> None:
        """Close the client's connections (botocore keeps a pool)."""
        close = getattr(self._client, "close", None)
        if close is not None:
            close()

    def get(self, name: str, if_match: str | None = None) -> Stored | None:
        """The object, or None when there is none (or, with ``if_match``, a
        412 raises ``Refused``: it changed since)."""
        return self.read(name, if_match)[0]

    def read(self, name: str, if_match: str | None = None) -> tuple[Stored | None, datetime]:
        """The object (or None) and the store's ``Date`` of the answer: a
        missing object's answer carries the store's clock too."""
        kwargs: dict[str, Any] = {"Bucket": self.place.bucket, "Key": name}
        if if_match is not None:
            kwargs["IfMatch"] = if_match
        guard = _Errors(self, name)
        with guard:
            answer = self._client.get_object(**kwargs)
            body = answer["Body"].read()
            date = _date(answer)
            return Stored(body, answer["ETag"], answer["LastModified"], date), date
        assert guard.date is not None  # reached only after a 404: there is no such object
        return None, guard.date

    def put(self, name: str, body: bytes | IO[bytes], *, if_match: str | None = None,
            if_none_match: bool = False) -> tuple[str, datetime]:
        """Write ``name``; with ``if_match`` only over that version, with
        ``if_none_match`` only where there is no object. Returns the new ETag
        and the store's ``Date`` of the answer. Raises ``Refused`` when the
        store refused the condition."""
        kwargs: dict[str, Any] = {"Bucket": self.place.bucket, "Key": name, "Body": body}
        if if_match is not None:
            kwargs["IfMatch"] = if_match
        if if_none_match:
            kwargs["IfNoneMatch"] = "*"
        with _Errors(self, name):
            answer = self._client.put_object(**kwargs)
            return str(answer["ETag"]), _date(answer)
        raise StoreUnavailable(f"S3 answered 404 to a write of {name!r} in {self.place.url}")

    def delete(self, name: str) -> None:
        with _Errors(self, name):
            self._client.delete_object(Bucket=self.place.bucket, Key=name)

    def names(self, prefix: str) -> Iterator[str]:
        """Every object name that starts with ``prefix``, in the store's order
        (UTF-8 binary order on S3)."""
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.place.bucket, Prefix=prefix)
        with _Errors(self, prefix):
            for page in pages:
                for item in page.get("Contents", ()):
                    yield str(item["Key"])


class _Errors:
    """Turns botocore's exceptions into ours, and swallows a 404 of a missing
    object (the caller's code after the ``with`` then runs)."""

    def __init__(self, bucket: Bucket, name: str) -> None:
        self.bucket = bucket
        self.name = name
        self.date: datetime | None = None  # the store's clock, from a 404's answer

    def __enter__(self) -> _Errors:
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        if exc is None:
            return False
        from botocore.exceptions import BotoCoreError, ClientError

        where = f"{self.bucket.place.url} ({self.name}) at {self.bucket.endpoint}"
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            code = str(error.get("Code", ""))
            if status == 404 and code in ("NoSuchKey", "404", "NotFound"):
                self.date = _date(exc.response)
                return True
            if status in (409, 412):
                raise Refused(status, str(error.get("Condition") or code)) from None
            raise StoreUnavailable(f"S3 said {code or status}: {error.get('Message', '')}"
                                   f" for {where}") from None
        if isinstance(exc, BotoCoreError):
            raise StoreUnavailable(f"S3 could not be reached for {where}: "
                                   f"{type(exc).__name__}: {exc}") from None
        return False


def _date(answer: dict[str, Any]) -> datetime:
    """The store's clock: the answer's ``Date`` header (whole seconds)."""
    text = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if not text:
        raise StoreUnavailable("the S3 answer has no Date header: its clock is the one the "
                               "bucket store judges expiry on")
    return parsedate_to_datetime(text).astimezone(timezone.utc)


def _custom_endpoint() -> bool:
    """Path-style addressing for an endpoint of one's own (an emulator, MinIO,
    a proxy): its host names no bucket. AWS itself keeps the default."""
    import os

    return bool(os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))
