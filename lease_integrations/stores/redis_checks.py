"""What the Redis store checks at connect: the server answers, the scripts
load, and the connected user holds every ACL right the store will ever use.

Without the rights probe a least-privilege user finds a missing right late and
in the wrong shape: a missing ``+time`` (scripts call ``TIME``, and commands
inside scripts are checked against the caller's ACL) fails the first acquire
as an outage. The probe is one script run as the connected user: Redis 7's
``redis.acl_check_cmd`` answers "may this user run this command on this key"
without running anything, so it needs no admin rights (unlike
``ACL GETUSER`` / ``ACL DRYRUN``) and touches no data. On Redis 6 the function
does not exist and the probe is skipped.

The list of commands is read from the store's own scripts, so the probe, the
rule in the error message and the documented rule (``acl_rule``) cannot drift
from what the scripts call.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from ..core.errors import ConfigurationError, StoreUnavailable
from .redis_tls import short_error

#: Commands the store sends itself (outside its scripts): script calls, the
#: connect check, ``list`` (SCAN; and SCRIPT EXISTS, which redis-py sends before
#: a pipeline of scripts), ``history`` (XREVRANGE, and LRANGE for the list an
#: earlier version wrote), ``wait_for_release`` (BLPOP) and the eviction-policy
#: check (INFO). The store uses no channels.
CLIENT_COMMANDS = ("evalsha", "script|load", "script|exists", "ping", "info", "scan", "exists",
                   "xrevrange", "lrange", "blpop")

#: What redis-py's RedisCluster client sends besides: the slot map and the
#: command table (to find each command's keys).
CLUSTER_COMMANDS = ("cluster|slots", "command")

#: The arguments each command is checked with: K is a key under the prefix.
#: ``redis.acl_check_cmd`` does not check arity, and
#: Redis 7.0 crashes on a keyed command given fewer arguments than its key
#: spec reads (say, EVALSHA without numkeys), so every entry here is a
#: complete, well-formed call, and a command not listed is never probed (it is
#: still in the rule). EVALSHA is not listed: the probe's own call checks it.
PROBE_ARGS: dict[str, tuple[str, ...]] = {
    "time": (), "ping": (), "info": ("memory",), "scan": ("0",),
    "script|load": ("return 1",), "script|exists": ("0" * 40,),
    "cluster|slots": (), "command": (),
    "get": ("K",), "set": ("K", "0"), "del": ("K",), "unlink": ("K",), "exists": ("K",),
    "incr": ("K",), "incrby": ("K", "1"), "pttl": ("K",), "ttl": ("K",),
    "pexpire": ("K", "1"), "expire": ("K", "1"), "pexpireat": ("K", "1"), "persist": ("K",),
    "hget": ("K", "f"), "hmget": ("K", "f"), "hset": ("K", "f", "v"), "hsetnx": ("K", "f", "v"),
    "hdel": ("K", "f"), "hgetall": ("K",), "hexists": ("K", "f"), "hlen": ("K",),
    "hincrby": ("K", "f", "1"), "hmset": ("K", "f", "v"),
    "rpush": ("K", "v"), "lpush": ("K", "v"), "ltrim": ("K", "0", "1"),
    "lrange": ("K", "0", "1"), "llen": ("K",), "lindex": ("K", "0"),
    "xadd": ("K", "*", "f", "v"), "xrevrange": ("K", "+", "-"),
}

_SEP = "\x1f"
_CALL = re.compile(r"redis\.p?call\(\s*['\"]([A-Za-z]+)['\"]")

# ARGV: complete commands, words joined by \x1f. Returns the ones the user may
# not run, or {"?"} when Redis has no acl_check_cmd (Redis 6).
PROBE = """
if type(redis.acl_check_cmd) ~= 'function' then return {'?'} end
local missing = {}
for i = 1, #ARGV do
  local args = {}
  for word in string.gmatch(ARGV[i], '[^\\31]+') do args[#args + 1] = word end
  local ok, allowed = pcall(redis.acl_check_cmd, unpack(args))
  if ok and not allowed then missing[#missing + 1] = i end
end
return missing
"""


def probe_calls(commands: Iterable[str], key: str) -> list[tuple[str, str]]:
    """(command, encoded call) for every command we know how to probe safely."""
    calls = []
    for name in commands:
        if name not in PROBE_ARGS:
            continue
        words = [*name.split("|"),
                 *(key if a == "K" else a for a in PROBE_ARGS[name])]
        calls.append((name, _SEP.join(words)))
    return calls


def script_commands(scripts: Iterable[str]) -> list[str]:
    """Every command the Lua scripts call, lower case, sorted."""
    return sorted({name.lower() for script in scripts for name in _CALL.findall(script)})


def required_commands(scripts: Iterable[str], *, cluster: bool = False) -> list[str]:
    return sorted({*CLIENT_COMMANDS, *script_commands(scripts),
                   *(CLUSTER_COMMANDS if cluster else ())})


def acl_rule(prefix: str, scripts: Iterable[str], *, cluster: bool = False) -> str:
    """The least-privilege ACL rule for a store with this key prefix, in
    ``ACL SETUSER`` syntax (keys, no channels, commands)."""
    commands = " ".join(f"+{c}" for c in required_commands(scripts, cluster=cluster))
    return f"resetkeys ~{{{prefix}:* resetchannels -@all {commands}"


def _refused(url: str, what: str, rule: str) -> ConfigurationError:
    return ConfigurationError(
        f"the Redis user of {url!r} lacks rights the lease store needs: {what}. "
        f"Grant it: ACL SETUSER <user> {rule}")


def connect_check(client: Any, scripts: Sequence[Any], *, cluster: bool, probe_key: str,
                  prefix: str, url: str, renew_client: Any = None) -> None:
    """PING, SCRIPT LOAD every script, then the rights probe; a separate
    ``renew_client`` is PINGed too, so the first renewal finds its connection
    open. A connection
    reset gets one more try (a restarting proxy or server); a timeout does
    not, so an unreachable host costs one connect timeout. Every failure is a
    ConfigurationError (credentials, rights, database) or StoreUnavailable."""
    sources = [s.script for s in scripts]
    rule = acl_rule(prefix, sources, cluster=cluster)
    for attempt in (1, 2):
        try:
            if cluster:  # a Cluster pipeline cannot carry these: one call each
                client.ping()
                for source in sources:
                    client.script_load(source)
            else:
                pipe = client.pipeline(transaction=False)
                pipe.ping()
                for source in sources:
                    pipe.script_load(source)
                pipe.execute()
            probe = client.register_script(PROBE)
            calls = probe_calls(required_commands(sources, cluster=cluster), probe_key)
            missing = probe(keys=[probe_key], args=[encoded for _, encoded in calls])
            if missing and missing != ["?"]:
                what = ", ".join(f"+{calls[int(i) - 1][0]}" for i in missing)
                raise _refused(url, f"commands or key rights: {what} "
                                    f"(checked on key {probe_key!r})",
                               rule)
            if renew_client is not None and renew_client is not client:
                renew_client.ping()
            return
        except redis.exceptions.NoPermissionError as exc:
            client.close()
            raise _refused(url, str(exc).rpartition("caused error: ")[2], rule) from None
        except (redis.AuthenticationError, redis.exceptions.AuthorizationError) as exc:
            client.close()
            raise ConfigurationError(f"Redis refused the credentials in {url!r}: {exc}") from None
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            client.close()
            if attempt == 1 and not isinstance(exc, redis.TimeoutError):
                continue
            raise StoreUnavailable(f"cannot reach Redis: {short_error(exc)}", url=url) from None
        except RedisClusterException as exc:  # not a RedisError: a Cluster that lost slots
            client.close()
            raise StoreUnavailable(f"cannot reach Redis: {short_error(exc)}", url=url) from None
        except redis.RedisError as exc:
            client.close()
            if "DB index" in str(exc):
                raise ConfigurationError(f"bad database number in {url!r}: {exc}") from None
            raise StoreUnavailable(
                f"Redis refused the lease store's setup (PING, SCRIPT LOAD): "
                f"{type(exc).__name__}: {exc}", url=url) from None
