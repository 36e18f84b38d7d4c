"""The Redis fencing guard: a Lua script that rejects an older token, on the
user's own Redis client.

``fence.check(client, "ledger", lease.token)`` raises the resource's
high-water token to ``token``, or raises ``StaleToken`` if the resource has
already accepted a newer one. ``fence.fenced_set(client, "ledger", token, key,
value)`` does the check and the caller's write in one script, so no newer
holder can write in between: the guard joins the write instead of wrapping it.

The client is duck-typed (anything with redis-py's ``register_script``), so
this module imports no Redis library. On Redis Cluster, put a hash tag in the
resource name and the written key (``"{ledger}"``, ``"{ledger}:total"``) so
the fence key and the data share a slot.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError, StaleToken

# KEYS[1] = fence key. ARGV[1] = token. Returns {accepted 0/1, high-water mark}.
_CHECK = """
local token = tonumber(ARGV[1])
local mark = tonumber(redis.call('GET', KEYS[1]) or '0')
if token < mark then return {0, mark} end
if token > mark then redis.call('SET', KEYS[1], ARGV[1]) end
return {1, token}
"""

# KEYS[1] = fence key, KEYS[2] = the caller's key. ARGV[1] = token, ARGV[2] = value,
# ARGV[3] = expiry in ms (0 = none). The write happens only if the token passes.
_FENCED_SET = """
local token = tonumber(ARGV[1])
local mark = tonumber(redis.call('GET', KEYS[1]) or '0')
if token < mark then return {0, mark} end
if token > mark then redis.call('SET', KEYS[1], ARGV[1]) end
if tonumber(ARGV[3]) > 0 then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
else
  redis.call('SET', KEYS[2], ARGV[2])
end
return {1, token}
"""


class RedisFence:
    """High-water tokens in keys ``<prefix>:<resource>`` (never expiring)."""

    def __init__(self, prefix: str = "lease-fence") -> None:
        if not isinstance(prefix, str) or not prefix:
            raise ConfigurationError(f"fence key prefix must be a non-empty string, got {prefix!r}")
        self.prefix = prefix

    def key(self, resource: str) -> str:
        return f"{self.prefix}:{resource}"

    def check(self, client: Any, resource: str, token: int) -> None:
        """Accept ``token`` for ``resource`` or raise ``StaleToken``. Equal tokens
        pass, so one holder may write many times."""
        self._validate(resource, token)
        self._run(client, _CHECK, [self.key(resource)], [token], resource, token)

    def fenced_set(self, client: Any, resource: str, token: int, key: str, value: Any,
                   *, px: int | None = None) -> None:
        """``SET key value`` (with ``PX px`` if given) only if ``token`` passes the
        fence, in one atomic script; raise ``StaleToken`` and write nothing otherwise."""
        self._validate(resource, token)
        if px is not None and (isinstance(px, bool) or not isinstance(px, int) or px <= 0):
            raise ConfigurationError(f"px must be a positive number of milliseconds, got {px!r}")
        self._run(client, _FENCED_SET, [self.key(resource), key], [token, value, px or 0],
                  resource, token)

    def newest(self, client: Any, resource: str) -> int | None:
        """The highest token ``resource`` has accepted, or None."""
        raw = client.get(self.key(resource))
        return None if raw is None else int(raw)

    @staticmethod
    def _validate(resource: str, token: int) -> None:
        if not isinstance(resource, str) or not resource:
            raise ConfigurationError(f"fenced resource name must be a non-empty string, got {resource!r}")
        if isinstance(token, bool) or not isinstance(token, int) or token < 1:
            raise ConfigurationError(f"fencing token must be a positive integer, got {token!r}")

    @staticmethod
    def _run(client: Any, script: str, keys: list[str], args: list[Any], resource: str,
             token: int) -> None:
        accepted, mark = client.register_script(script)(keys=keys, args=args)
        if not int(accepted):
            raise StaleToken(resource, token, int(mark))
