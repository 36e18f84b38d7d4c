"""Leases in Redis (``redis://`` and ``rediss://``), shared by every host.

Acquire, renew and release are each one Lua script called by SHA: one atomic
step and one round trip (redis-py's ``Script`` reloads a script the server
flushed). Expiry and times are judged by the scripts on the server's
``TIME``; tokens are floored by that clock in microseconds. The key layout
and the scripts are in ``redis_scripts.py``; the eviction-policy check in
``redis_eviction.py``; release wake-ups in ``redis_notify.py``.

The client never retries a command by itself: a retried acquire whose first
reply was lost would find its own lease and report it busy. The heartbeat and
``LeaseLock`` retry at the right level instead.
"""

from __future__ import annotations

import builtins
import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote, urlencode

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..core.config import mask_url, parse_url, query_options
from ..core.errors import ConfigurationError, LeaseError, StoreUnavailable
from ..core.record import AcquireResult, LeaseRecord, meta_from_json, parse_field
from ..core.store import (
    HISTORY_LIMIT,
    EventKind,
    LeaseEvent,
    LeaseStore,
    RecordList,
    readable_records,
)
from . import redis_scripts
from .redis_eviction import check_eviction_policy
from .redis_notify import ReleaseListener

#: A prefix is part of every key's hash tag ``{prefix:key}``: no ``:`` (so the
#: split between prefix and key is unambiguous) and no braces or glob characters.
PREFIX_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
DEFAULT_PREFIX = "lease"
DEFAULT_TIMEOUT = 5.0

_OPTIONS: dict[str, type] = {"prefix": str, "socket_timeout": float, "connect_timeout": float,
                              "allow_eviction": bool}
_TLS_OPTIONS: dict[str, type] = {
    "ssl_ca_certs": str, "ssl_certfile": str, "ssl_keyfile": str,
    "ssl_cert_reqs": str, "ssl_check_hostname": bool,
}


def _ms(value: Any) -> datetime:
    """A stored time (integer milliseconds as text) as a datetime; raises on garbage."""
    if isinstance(value, str) and not value.isdigit():
        raise ValueError(f"not a time in milliseconds: {value!r}"[:80])
    return datetime.fromtimestamp(int(value) / 1000.0, timezone.utc)


def _token(value: Any) -> int:
    if isinstance(value, str) and not value.isdigit():
        raise ValueError(f"not a token: {value!r}"[:80])
    return int(value)


def _detail(detail: Mapping[str, Any] | None) -> str:
    return json.dumps(dict(detail or {}), default=str)


def _event_head(kind: str, detail_json: str, holder: str | None = None, *,
                with_holder: bool = True) -> str:
    """The start of an event's JSON object; the script appends token and time
    (and, for a break, the holder it found)."""
    fields = [f'"kind": {json.dumps(kind)}']
    if with_holder:
        fields.append(f'"holder": {json.dumps(holder)}')
    fields.append(f'"detail": {detail_json}')
    return "{" + ", ".join(fields)


_RELEASED_HEAD = _event_head("released", "{}", with_holder=False)


class RedisStore(LeaseStore):
    """One Redis (or Redis Cluster slot per key) shared by every worker."""

    notifies = True

    def __init__(self, client: Any, *, prefix: str = DEFAULT_PREFIX, url: str = "redis://",
                 allow_eviction: bool = False) -> None:
        """Wrap a ``redis.Redis`` client (built with ``decode_responses=True``).
        Checks reachability and loads the scripts in one round trip, then the
        eviction policy (``allow_eviction=True`` skips refusing ``allkeys-*``)."""
        if not isinstance(prefix, str) or not PREFIX_PATTERN.fullmatch(prefix):
            raise ConfigurationError(
                f"Redis key prefix {prefix!r} in {mask_url(url)!r} must be 1-64 letters, digits, "
                "'.', '_' or '-' (no ':' or braces: it becomes part of the key's hash tag)"
            )
        self.url = mask_url(url)
        self.prefix = prefix
        self._client = client
        if not getattr(client.get_encoder(), "decode_responses", False):
            raise ConfigurationError(
                "the Redis client for the lease store must be built with decode_responses=True"
            )
        pool = getattr(client, "connection_pool", None)  # RedisCluster has none (and db 0)
        self._db = int(getattr(pool, "connection_kwargs", {}).get("db", 0) or 0)
        scripts = redis_scripts
        self._acquire = client.register_script(scripts.ACQUIRE)
        self._renew = client.register_script(scripts.RENEW)
        self._release = client.register_script(scripts.RELEASE)
        self._force = client.register_script(scripts.FORCE_RELEASE)
        self._get = client.register_script(scripts.GET)
        self._event = client.register_script(scripts.RECORD_EVENT)
        self._listener = ReleaseListener(client)
        self._key_cache: dict[str, tuple[list[str], list[str]]] = {}
        self._connect_check()
        try:
            check_eviction_policy(client, url=self.url, allow_eviction=allow_eviction)
        except BaseException:
            self._client.close()
            raise

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStore:
        parts = parse_url(url)
        scheme = parts.scheme.lower()
        tls = scheme == "rediss"
        if scheme not in ("redis", "rediss"):
            raise ConfigurationError(f"not a Redis URL: {mask_url(url)!r}")
        allowed = {**_OPTIONS, **(_TLS_OPTIONS if tls else {})}
        # Keyword options pass the same checks as the URL's (and win over them).
        extra = urlencode({name: str(value) for name, value in options.items()})
        opts = query_options(parts._replace(query="&".join(q for q in (parts.query, extra) if q)),
                             allowed, url)
        if opts.get("ssl_cert_reqs", "required") not in ("none", "optional", "required"):
            raise ConfigurationError(
                f"ssl_cert_reqs={opts['ssl_cert_reqs']!r} in {mask_url(url)!r} must be "
                "none, optional or required"
            )
        db_text = parts.path.strip("/") or "0"
        if not db_text.isdigit() or int(db_text) > 1_000_000:
            raise ConfigurationError(
                f"the path of Redis URL {mask_url(url)!r} must be a database number like /0, "
                f"got {parts.path!r}"
            )
        kwargs: dict[str, Any] = {
            "host": parts.hostname or "localhost",
            "port": parts.port or 6379,
            "db": int(db_text),
            "username": unquote(parts.username) if parts.username else None,
            "password": unquote(parts.password) if parts.password is not None else None,
            "socket_timeout": float(opts.pop("socket_timeout", DEFAULT_TIMEOUT)),  # type: ignore[arg-type]
            "socket_connect_timeout": float(opts.pop("connect_timeout", DEFAULT_TIMEOUT)),  # type: ignore[arg-type]
            "decode_responses": True,
            "retry": Retry(NoBackoff(), 0),
        }
        prefix = str(opts.pop("prefix", DEFAULT_PREFIX))
        allow_eviction = bool(opts.pop("allow_eviction", False))
        if tls:
            kwargs["ssl"] = True
            kwargs.update(opts)
        return cls(redis.Redis(**kwargs), prefix=prefix, url=url, allow_eviction=allow_eviction)

    # -- plumbing -----------------------------------------------------------------
    def _connect_check(self) -> None:
        """One round trip at connect: PING proves the server answers (and the
        password and db are right), SCRIPT LOAD saves the first calls a NOSCRIPT.
        A connection reset gets one more try (a restarting proxy or server); a
        timeout does not, so an unreachable host costs one connect timeout."""
        for attempt in (1, 2):
            try:
                pipe = self._client.pipeline(transaction=False)
                pipe.ping()
                for script in (self._acquire, self._renew, self._release, self._force,
                               self._get, self._event):
                    pipe.script_load(script.script)
                pipe.execute()
                return
            except (redis.AuthenticationError, redis.exceptions.AuthorizationError) as exc:
                self._client.close()
                raise ConfigurationError(
                    f"Redis refused the credentials in {self.url!r}: {exc}"
                ) from None
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                self._client.close()
                if attempt == 1 and not isinstance(exc, redis.TimeoutError):
                    continue
                raise StoreUnavailable(f"cannot reach Redis: {exc}", url=self.url) from None
            except redis.RedisError as exc:
                self._client.close()
                if "DB index" in str(exc):
                    raise ConfigurationError(
                        f"bad database number in {self.url!r}: {exc}") from None
                raise StoreUnavailable(
                    f"Redis refused the lease store's setup (PING, SCRIPT LOAD): "
                    f"{type(exc).__name__}: {exc}", url=self.url) from None

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except redis.RedisError as exc:
            raise StoreUnavailable(f"Redis error: {type(exc).__name__}: {exc}",
                                   url=self.url) from exc

    def _tag(self, key: str) -> str:
        return f"{{{self.prefix}:{key}}}"

    def _keys(self, key: str, *names: str) -> list[str]:
        tag = self._tag(key)
        return [f"{tag}:{name}" for name in names]

    def _prepared(self, key: str) -> tuple[list[str], list[str]]:
        """The key names a lease's scripts take: [rec, hist] and [rec],
        built once per key (a lock calls with the same key every time)."""
        found = self._key_cache.get(key)
        if found is None:
            if len(self._key_cache) > 4096:  # bounded: a process touching many keys
                self._key_cache.clear()
            both = self._keys(key, "rec", "hist")
            found = self._key_cache[key] = (both, both[:1])
        return found

    def _channel(self, key: str) -> str:
        # PUBLISH ignores the db number: put it in the channel so dbs do not cross-wake.
        return f"{self._tag(key)}:released@{self._db}"

    def _record(self, key: str, reply: Any) -> LeaseRecord | None:
        """A flat record reply (see redis_scripts) as a record; a field that
        cannot be parsed raises ``CorruptRecord`` naming it."""
        if not reply:
            return None
        _, holder, token, acquired, renewed, expires, now, meta = reply
        return LeaseRecord(key, holder or None, parse_field(key, "token", _token, token),
                           parse_field(key, "acquired_at", _ms, acquired),
                           parse_field(key, "renewed_at", _ms, renewed),
                           parse_field(key, "expires_at", _ms, expires), _ms(now),
                           parse_field(key, "meta", meta_from_json, meta))

    # -- protocol -----------------------------------------------------------------
    def acquire(self, key: str, holder: str, secret: str, ttl: float,
                meta: Mapping[str, Any]) -> AcquireResult:
        plain = dict(meta)
        meta_json = json.dumps(plain, default=str)
        head = _event_head("acquired", '{"meta": ' + meta_json + "}", holder)
        keys = self._prepared(key)[0]
        with self._errors():
            reply = self._acquire(keys=keys, args=[holder, secret, max(1, round(ttl * 1000)),
                                                   meta_json, head, HISTORY_LIMIT])
        if not reply or reply[0] != 1:
            return AcquireResult(False, self._record(key, reply))
        _, token, now, expires = reply
        at = _ms(now)
        # Granted: the record is what we sent plus the server's token and times.
        if any(not isinstance(v, (str, int, float, bool, type(None))) for v in plain.values()):
            plain = json.loads(meta_json)
        return AcquireResult(True, LeaseRecord(key, holder, int(token), at, at, _ms(expires),
                                               at, plain))

    def renew(self, key: str, secret: str, token: int, ttl: float) -> bool:
        with self._errors():
            done = self._renew(keys=self._prepared(key)[1],
                               args=[secret, str(token), max(1, round(ttl * 1000))])
        return bool(done)

    def release(self, key: str, secret: str, token: int) -> bool:
        with self._errors():
            done = self._release(
                keys=self._prepared(key)[0],
                args=[secret, str(token), _RELEASED_HEAD, HISTORY_LIMIT, self._channel(key)],
            )
        return bool(done)

    def get(self, key: str) -> LeaseRecord | None:
        with self._errors():
            return self._record(key, self._get(keys=self._prepared(key)[1]))

    def list(self, prefix: str = "") -> RecordList:
        start = f"{{{self.prefix}:"
        pattern = start + re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + "*}:rec"
        with self._errors():
            names = sorted(self._client.scan_iter(match=pattern, count=1000))
            keys = [n[len(start):-len("}:rec")] for n in names]
            keys = [k for k in keys if k.startswith(prefix)]
            pipe = self._client.pipeline(transaction=False)
            for k in keys:
                self._get(keys=self._prepared(k)[1], client=pipe)
            replies = pipe.execute() if keys else []
        return readable_records(zip(keys, replies, strict=True),
                                lambda pair: self._record(pair[0], pair[1]))

    def force_release(self, key: str, by: str) -> LeaseRecord | None:
        head = _event_head("broken", _detail({"by": by}), with_holder=False)
        with self._errors():
            reply = self._force(keys=self._prepared(key)[0],
                                args=[head, HISTORY_LIMIT, self._channel(key)])
        return self._record(key, reply)

    def history(self, key: str, limit: int = 50) -> builtins.list[LeaseEvent]:
        limit = min(int(limit), HISTORY_LIMIT)
        if limit <= 0:
            return []
        with self._errors():
            raw = self._client.lrange(self._prepared(key)[0][1], -limit, -1)
        events: builtins.list[LeaseEvent] = []
        for line in raw:
            try:
                e = json.loads(line)
                at = _ms(e["at"])
                events.append(LeaseEvent(key, e["kind"], int(e["token"]), e["holder"], at,
                                         e.get("detail") or {}))
            except (ValueError, TypeError, KeyError):
                continue  # a garbage history line hides itself, not the rest
        return events

    def record_event(self, key: str, kind: EventKind, holder: str | None, token: int,
                     detail: Mapping[str, Any] | None = None) -> None:
        with self._errors():
            head = _event_head(kind, _detail(detail), holder)
            self._event(keys=self._prepared(key)[0], args=[head, str(token), HISTORY_LIMIT])

    def wait_for_release(self, key: str, timeout: float) -> bool:
        if timeout <= 0:
            return False
        def is_free() -> bool:
            try:
                record = self.get(key)
            except (StoreUnavailable, LeaseError):
                return False
            return record is None or not record.held

        return self._listener.wait(self._channel(key), is_free, timeout)

    def close(self) -> None:
        self._listener.close()
        self._client.close()
