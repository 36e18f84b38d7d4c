"""Leases in Redis (``redis://``, ``rediss://``, ``redis+cluster://``,
``redis+sentinel://``), shared by every host. URLs and clients: ``redis_connect.py``;
the connect-time checks (ACL rights): ``redis_checks.py``; the eviction-policy
check: ``redis_eviction.py``.

Acquire, renew and release are each one Lua script called by SHA: one atomic
step and one round trip (redis-py's ``Script`` reloads a script the server
flushed). Expiry and times are judged by the scripts on the server's
``TIME``; tokens are floored by that clock in microseconds. The key layout
and the scripts are in ``redis_scripts.py``; the eviction-policy check in
``redis_eviction.py``. A release wakes the next waiter through the key's
wake-up list (``BLPOP``, see ``wait_for_release``).

The client never retries a command by itself: a retried acquire whose first
reply was lost would find its own lease and report it busy. The heartbeat and
``LeaseLock`` retry at the right level instead.
"""

from __future__ import annotations

import builtins
import logging
import re
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, NamedTuple

import redis
from redis.exceptions import RedisClusterException

from ..core.config import mask_url
from ..core.errors import ConfigurationError, StoreUnavailable
from ..core.record import (
    AcquireResult,
    LeaseRecord,
    meta_as_stored,
    meta_from_json,
    meta_to_json,
    parse_field,
)
from ..core.store import (
    HISTORY_LIMIT,
    EventKind,
    EventList,
    LeaseEvent,
    LeaseStore,
    RecordList,
    RenewItem,
    readable_records,
)
from . import (
    redis_checks,
    redis_cluster_batch,
    redis_connect,
    redis_history,
    redis_scripts,
    redis_wire,
)
from .redis_eviction import check_eviction_policy

log = logging.getLogger("lease_integrations")

#: A prefix is part of every key's hash tag ``{prefix:key}``: no ``:`` (so the
#: split between prefix and key is unambiguous) and no braces or glob characters.
PREFIX_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
DEFAULT_PREFIX = "lease"
DEFAULT_TIMEOUT = redis_connect.DEFAULT_TIMEOUT
#: Leases per RENEW_MANY call: bounds the time one script holds the server
#: (about 1 us per lease) and the size of one request.
RENEW_BATCH = 500
#: Leases whose packed renewal words are kept (``_renew_words``).
RENEW_CACHE = 8192


def _ms(value: Any) -> datetime:
    """A stored time (integer milliseconds as text) as a datetime; raises on garbage."""
    if isinstance(value, str) and not value.isdigit():
        raise ValueError(f"not a time in milliseconds: {value!r}"[:80])
    return datetime.fromtimestamp(int(value) / 1000.0, timezone.utc)


def _token(value: Any) -> int:
    if isinstance(value, str) and not value.isdigit():
        raise ValueError(f"not a token: {value!r}"[:80])
    return int(value)


class _Keys(NamedTuple):
    """The key lists of one lease's script calls (see ``redis_scripts``)."""

    acquire: list[str]
    rec: list[str]
    release: list[str]
    event: list[str]
    force: list[str]
    wake: str
    waiting: str


class _Errors:
    """``with self._errors:`` turns a Redis error into ``StoreUnavailable``.
    A plain class, not ``@contextmanager``: it sits on every operation and a
    generator-based one costs five calls more per use."""

    __slots__ = ("url",)

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> None:
        return None

    def __exit__(self, etype: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        if isinstance(exc, (redis.RedisError, RedisClusterException)):
            raise StoreUnavailable(f"Redis error: {redis_connect.short_error(exc)}",
                                   url=self.url) from exc


def _check_prefix(prefix: object, url: str) -> None:
    if not isinstance(prefix, str) or not PREFIX_PATTERN.fullmatch(prefix):
        raise ConfigurationError(
            f"Redis key prefix {prefix!r} in {mask_url(url)!r} must be 1-64 letters, digits, "
            "'.', '_' or '-' (no ':' or braces: it becomes part of the key's hash tag)"
        )


class RedisStore(LeaseStore):
    """One Redis (or Redis Cluster slot per key) shared by every worker."""

    notifies = True

    def __init__(self, client: Any, *, prefix: str = DEFAULT_PREFIX, url: str = "redis://",
                 renew_client: Any = None, allow_eviction: bool = False) -> None:
        """Wrap a synchronous redis-py client built with ``decode_responses=True``:
        ``redis.Redis``, a Sentinel ``master_for()`` client or a
        ``redis.cluster.RedisCluster``. The client's automatic retries are
        switched off (see ``redis_connect``). ``renew_client`` (same server,
        small pool) carries heartbeat renewals; by default a plain ``Redis``
        gets one cloned from its pool, other clients share theirs.
        Checks reachability, the user's ACL rights and loads the scripts, then
        the eviction policy (``allow_eviction=True`` accepts ``allkeys-*``)."""
        _check_prefix(prefix, url)
        self.url = mask_url(url)
        self.prefix = prefix
        redis_connect.adopt_client(client)
        self._client = client
        self._cluster = redis_connect.is_cluster(client)
        # A Cluster batch costs one pipelined request per node, sent to every
        # node before any reply is read (redis_cluster_batch): batch there too.
        self.batch_renewals = True
        if renew_client is None:
            renew_client = redis_connect.renew_client_for(client) or client
        else:
            redis_connect.adopt_client(renew_client)
        self._renew_client = renew_client
        scripts = redis_scripts
        self._acquire = client.register_script(scripts.ACQUIRE)
        self._renew = renew_client.register_script(scripts.RENEW)
        self._renew_many = renew_client.register_script(scripts.RENEW_MANY)
        self._release = client.register_script(scripts.RELEASE)
        self._force = client.register_script(scripts.FORCE_RELEASE)
        self._get = client.register_script(scripts.GET)
        self._event = client.register_script(scripts.RECORD_EVENT)
        # The hot calls, packed by hand (``redis_wire``) except on a Cluster,
        # whose client routes every call by slot. Both take (keys, args).
        self._call_acquire, self._call_renew, self._call_renew_many, self._call_release = (
            (script if self._cluster else redis_wire.ScriptCall(owner, script))
            for owner, script in ((client, self._acquire), (renew_client, self._renew),
                                  (renew_client, self._renew_many), (client, self._release)))
        # Waiters block on a connection each: their own pool, so a crowd of
        # waiters never starves acquires and releases of connections.
        self._wait_client = redis_connect.wait_client_for(client) or client
        timeout = redis_connect.socket_timeout_of(client)
        self._wait_slice = max(0.05, timeout - 1.0) if timeout else 60.0
        self._key_cache: dict[str, _Keys] = {}
        self._renew_cache: dict[RenewItem, tuple[bytes, bytes]] = {}
        self._errors = _Errors(self.url)
        try:
            self._connect_check()
            check_eviction_policy(client, url=self.url, allow_eviction=allow_eviction)
        except BaseException:
            self._close_clients()
            raise

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStore:
        settings = redis_connect.parse(url, options, {"prefix": str, "allow_eviction": bool})
        prefix = str(settings.store_options.get("prefix", DEFAULT_PREFIX))
        allow_eviction = bool(settings.store_options.get("allow_eviction", False))
        _check_prefix(prefix, url)
        client, renew_client = redis_connect.build_clients(settings)
        try:
            return cls(client, prefix=prefix, url=url, renew_client=renew_client,
                       allow_eviction=allow_eviction)
        except BaseException:
            client.close()
            renew_client.close()
            raise

    # -- plumbing -----------------------------------------------------------------
    def _connect_check(self) -> None:
        """PING, SCRIPT LOAD and the ACL rights probe (``redis_checks``)."""
        redis_checks.connect_check(
            self._client, [self._acquire, self._renew, self._renew_many, self._release, self._force,
                           self._get, self._event],
            cluster=self._cluster, probe_key=self._keys("acl-probe", "rec")[0],
            prefix=self.prefix, url=self.url,
            renew_client=self._renew_client)


    def _tag(self, key: str) -> str:
        return f"{{{self.prefix}:{key}}}"

    def _keys(self, key: str, *names: str) -> list[str]:
        tag = self._tag(key)
        return [f"{tag}:{name}" for name in names]

    def _prepared(self, key: str) -> _Keys:
        """The key names a lease's scripts take, built once per key (a lock
        calls with the same key every time)."""
        found = self._key_cache.get(key)
        if found is None:
            if len(self._key_cache) > 4096:  # bounded: a process touching many keys
                self._key_cache.clear()
            rec, log, wake, waiting = self._keys(key, "rec", "log", "wake", "waiting")
            found = self._key_cache[key] = _Keys(
                acquire=[rec, log, waiting], rec=[rec], release=[rec, log, wake, waiting],
                event=[rec, log], force=[rec, log, wake], wake=wake, waiting=waiting)
        return found

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
        meta_json = meta_to_json(meta if type(meta) is dict else dict(meta))
        keys = self._prepared(key).acquire
        with self._errors:
            reply = self._call_acquire(keys, (holder, secret, str(max(1, round(ttl * 1000))),
                                              meta_json))
        if not reply or reply[0] != 1:
            return AcquireResult(False, self._record(key, reply))
        _, token, now, expires = reply
        at = _ms(now)
        # Granted: the record is what we sent plus the server's token and times.
        return AcquireResult(True, LeaseRecord(key, holder, int(token), at, at, _ms(expires),
                                               at, meta_as_stored(meta, meta_json)))

    def renew(self, key: str, secret: str, token: int, ttl: float) -> bool:
        with self._errors:
            done = self._call_renew(self._prepared(key).rec,
                                    (secret, str(token), str(max(1, round(ttl * 1000)))))
        return bool(done)

    def renew_many(self, items: Sequence[RenewItem]) -> builtins.list[bool | None]:
        """One script call for the whole batch (``RENEW_MANY``) on one server.
        A Cluster script cannot span slots and every key has its own slot, so
        there the batch is one pipeline of ``RENEW`` calls per node, all nodes
        at once (``redis_cluster_batch``); a lease whose node gave no verdict
        is None (retried by the heartbeat), never False (lost)."""
        if self._cluster:
            calls = [(self._prepared(key).rec[0], secret, str(token),
                      str(max(1, round(ttl * 1000)))) for key, secret, token, ttl in items]
            with self._errors:
                return redis_cluster_batch.renew_per_node(self._renew_client, self._renew, calls)
        out: builtins.list[bool | None] = []
        for start in range(0, len(items), RENEW_BATCH):
            chunk = items[start:start + RENEW_BATCH]
            with self._errors:
                if isinstance(self._call_renew_many, redis_wire.ScriptCall):
                    words = [self._renew_words(item) for item in chunk]
                    replies = self._call_renew_many.call_packed(
                        [key for key, _ in words], [args for _, args in words], 3 * len(chunk))
                else:
                    replies = self._call_renew_many(
                        [self._prepared(key).rec[0] for key, _, _, _ in chunk],
                        [word for _, secret, token, ttl in chunk
                         for word in (secret, str(token), str(max(1, round(ttl * 1000))))])
            out += [flag == "1" for flag in replies]
        return out

    def _renew_words(self, item: RenewItem) -> tuple[bytes, bytes]:
        """A lease's key and its three arguments to ``RENEW_MANY``, packed
        once: the heartbeat renews the same lease with the same words every
        interval, and packing them was most of a batch's cost on the client."""
        words = self._renew_cache.get(item)
        if words is None:
            key, secret, token, ttl = item
            if len(self._renew_cache) > RENEW_CACHE:  # bounded: leases come and go
                self._renew_cache.clear()
            words = self._renew_cache[item] = (
                redis_wire.pack_words([self._prepared(key).rec[0]]),
                redis_wire.pack_words([secret, str(token), str(max(1, round(ttl * 1000)))]))
        return words

    def release(self, key: str, secret: str, token: int) -> bool:
        with self._errors:
            done = self._call_release(self._prepared(key).release, (secret, str(token)))
        return bool(done)

    def get(self, key: str) -> LeaseRecord | None:
        with self._errors:
            return self._record(key, self._get(keys=self._prepared(key).rec))

    def list(self, prefix: str = "") -> RecordList:
        start = f"{{{self.prefix}:"
        pattern = start + re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + "*}:rec"
        with self._errors:
            names = sorted(self._client.scan_iter(match=pattern, count=1000))
            keys = [n[len(start):-len("}:rec")] for n in names]
            keys = [k for k in keys if k.startswith(prefix)]
            if self._cluster:  # a Cluster pipeline cannot carry scripts; SCAN saw every primary
                replies = [self._get(keys=self._prepared(k).rec) for k in keys]
            else:
                pipe = self._client.pipeline(transaction=False)
                for k in keys:
                    self._get(keys=self._prepared(k).rec, client=pipe)
                replies = pipe.execute() if keys else []
        return readable_records(zip(keys, replies, strict=True),
                                lambda pair: self._record(pair[0], pair[1]))

    def force_release(self, key: str, by: str, token: int | None = None) -> LeaseRecord | None:
        with self._errors:
            reply = self._force(keys=self._prepared(key).force,
                                args=[by, "" if token is None else str(int(token))])
        return self._record(key, reply)

    def history(self, key: str, limit: int = 50) -> builtins.list[LeaseEvent]:
        """The Stream's newest entries and, in the same round trip, the list
        an earlier version may still append to during a rolling upgrade."""
        limit = min(int(limit), HISTORY_LIMIT)
        if limit <= 0:
            return EventList()
        log_key, old_key = self._keys(key, "log", "hist")
        with self._errors:
            pipe = self._client.pipeline(transaction=False)
            pipe.xrevrange(log_key, count=limit)
            pipe.lrange(old_key, -limit, -1)
            entries, old_lines = pipe.execute()
        return redis_history.events(key, entries, old_lines, limit)

    def record_event(self, key: str, kind: EventKind, holder: str | None, token: int,
                     detail: Mapping[str, Any] | None = None) -> None:
        fields = redis_history.fields_of(kind, holder, token, dict(detail or {}))
        with self._errors:
            self._event(keys=self._prepared(key).event, args=fields)

    def wait_for_release(self, key: str, timeout: float) -> bool:
        """Block on the key's wake-up list (``BLPOP``): a release pushes one
        element, so it wakes one waiter, the one that blocked first, instead
        of every waiter racing for the key. Each slice first raises the
        key's waiting flag for its own length (a release pushes a wake-up
        only while it is up; a busy acquire raised it already, so a release
        between that answer and this wait is not missed). Blocks in slices
        shorter than the socket timeout. Connection trouble makes the wait a
        plain sleep returning False: the caller's next acquire reports an
        outage, or its polling takes over."""
        if timeout <= 0:
            return False
        keys = self._prepared(key)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0.001:
                return False
            slice_ = min(remaining, self._wait_slice)
            flag_ms = round(slice_ * 1000) + redis_scripts.WAIT_WINDOW_MS
            try:
                if self._cluster:
                    self._wait_client.set(keys.waiting, "1", px=flag_ms)
                    woken = self._wait_client.blpop([keys.wake], timeout=slice_)
                else:  # one round trip: a waiter queues as soon as it was told busy
                    pipe = self._wait_client.pipeline(transaction=False)
                    pipe.set(keys.waiting, "1", px=flag_ms)
                    pipe.blpop([keys.wake], timeout=slice_)
                    woken = pipe.execute()[1]
                if woken:
                    return True
            except (redis.RedisError, RedisClusterException) as exc:
                log.debug("waiting on %s failed: %s", key, exc)
                time.sleep(max(0.0, deadline - time.monotonic()))
                return False

    def close(self) -> None:
        self._close_clients()

    def _close_clients(self) -> None:
        if self._wait_client is not self._client:
            self._wait_client.close()
        self._client.close()
        if self._renew_client is not self._client:
            self._renew_client.close()
