"""The Redis store's Lua: each lease operation is one script, so it is one
atomic step on the server and one round trip from the client.

Keys of one lease (all share the hash tag ``{prefix:key}``, so they live in
one Redis Cluster slot and one script may touch them all):

- ``…:rec``   one hash: holder, secret, token, acquired_at, renewed_at,
  expires_at (milliseconds on the server's ``TIME``) and meta (JSON). Expiry
  is judged by the scripts against ``expires_at`` on the server's clock, so no
  key carries a TTL: only an ``allkeys-*`` eviction policy could drop it (the
  store refuses those at connect, see ``redis_eviction``). Release and break
  delete holder and secret; the hash and its token stay.
- ``…:log``   the history: a Stream, one entry per event, appended by the
  same script as the change it records and capped by ``XADD … MAXLEN ~``
  (whole stream nodes are dropped once it has grown past ``HISTORY_LIMIT``, so
  it holds between the limit and about twice that). An entry is plain
  field/value pairs (``kind``, ``token``, ``holder``, and ``meta``,
  ``took_token``/``took_holder``, ``by`` or ``detail`` as the kind needs);
  its ID's first half is the server's time in milliseconds. Nothing is
  formatted or JSON-encoded in Lua: the client builds the event when it
  reads it (``redis_history``).
- ``…:wake``  a list the waiters ``BLPOP`` on; a release pushes one element
  (one waiter wakes, first blocked first served), a break too. It carries no
  lease state, so it alone expires (``WAKE_TTL_MS``).
- ``…:waiting`` a flag with a TTL: someone may be waiting. A busy answer to
  an acquire sets it for ``WAIT_WINDOW_MS`` and every wait sets it for its
  own length, so it is up while any waiter waits; a release pushes a wake-up
  only while it is. An uncontended release therefore writes no wake-up,
  reads no clock and publishes nothing.
- ``…:hist``  the history list earlier versions wrote (one JSON text per event).
  Nothing here writes it any more; ``history()`` still reads it, so events a
  process of the older version records during a rolling upgrade (and the
  events before it) are not lost.

Tokens are floored by the server's clock in microseconds: ``token =
max(last + 1, now_us)``. A lost hash (failover to a lagging replica,
``FLUSHALL``, a restart without persistence, a ``DEL``) therefore resumes
above every token granted before, as long as the server's clock has not gone
back by more than the time between the last grant before the loss and the
first after it (see docs/concepts/tokens-and-identity.md). Lua numbers are
doubles: exact for integers below 2^53, ~285 years of microseconds.

Replies are flat arrays, so the client parses only what it needs:
granted ``{1, token, now, expires}``; busy or read
``{0|nil, holder|false, token, acquired, renewed, expires, now, meta}``.
The secret never leaves the server.
"""

from __future__ import annotations

from ..core.store import HISTORY_LIMIT

#: How long a wake-up nobody took stays (milliseconds): a waiter between two
#: BLPOPs still finds it; LeaseLock polls as well, so it need not be longer.
WAKE_TTL_MS = 10_000

#: How long a busy answer keeps releases waking waiters (milliseconds): it
#: covers the gap between a waiter's busy answer and its wait (which sets
#: the flag for its own length); a waiter that gave up costs at most one
#: wake-up nobody takes.
WAIT_WINDOW_MS = 5_000

# Shared helpers, prepended to every script. KEYS[1] = rec, KEYS[2] = log;
# wake() pushes to KEYS[3].
_PRELUDE = """
local function fmt(n) return string.format('%.0f', n) end
local function clock()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return math.floor(us / 1000), us
end
-- The record as a flat reply, or false when the key has none.
local function record(now)
  local f = redis.call('HMGET', KEYS[1], 'holder', 'token', 'acquired_at', 'renewed_at',
                       'expires_at', 'meta')
  if not f[2] then return false end
  return {0, f[1], f[2], f[3], f[4], f[5], now, f[6]}
end
-- Wake the next waiter: one element, so one waiter wakes, in the order they
-- blocked. DEL first, so releases nobody waited for leave at most one stale
-- wake-up behind; the list carries no lease state, so it may expire (and
-- must: nothing else removes it).
local function wake()
  redis.call('DEL', KEYS[3])
  redis.call('RPUSH', KEYS[3], '1')
  redis.call('PEXPIRE', KEYS[3], """ + str(WAKE_TTL_MS) + """)
end
"""

#: The start of every history append: the cap is part of the script text.
_XADD = "redis.call('XADD', KEYS[2], 'MAXLEN', '~', " + str(HISTORY_LIMIT) + ", '*', "

#: KEYS: rec, log, waiting. ARGV: holder, secret, ttl_ms, meta_json.
#: Returns {1, token, now, expires} when granted, the busy record otherwise
#: (and then raises the waiting flag: the caller may wait).
#: A record whose expires_at cannot be read as a number counts as held (the
#: client then reports it as corrupt) rather than be granted over.
ACQUIRE = _PRELUDE + """
local now, now_us = clock()
local f = redis.call('HMGET', KEYS[1], 'holder', 'token', 'expires_at')
if f[1] then
  local expires = tonumber(f[3])
  if expires == nil or expires > now then
    redis.call('SET', KEYS[3], '1', 'PX', """ + str(WAIT_WINDOW_MS) + """)
    return record(now)
  end
end
local token = math.max((tonumber(f[2]) or 0) + 1, now_us)
local expires = now + tonumber(ARGV[3])
local t = fmt(token)
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'secret', ARGV[2], 'token', t, 'acquired_at', now,
           'renewed_at', now, 'expires_at', expires, 'meta', ARGV[4])
if f[1] then  -- a grant over a record that still names a holder took over an expired lease
  """ + _XADD + """'kind', 'acquired', 'token', t, 'holder', ARGV[1], 'meta', ARGV[4],
                'took_token', f[2], 'took_holder', f[1])
else
  """ + _XADD + """'kind', 'acquired', 'token', t, 'holder', ARGV[1], 'meta', ARGV[4])
end
return {1, t, now, expires}
"""

#: KEYS: rec. ARGV: secret, token, ttl_ms. Returns 1 when renewed.
#: An expired lease is never extended: no resurrection.
RENEW = _PRELUDE + """
local f = redis.call('HMGET', KEYS[1], 'secret', 'token', 'expires_at')
if f[1] ~= ARGV[1] or f[2] ~= ARGV[2] then return 0 end
local now = clock()
if (tonumber(f[3]) or 0) <= now then return 0 end
redis.call('HSET', KEYS[1], 'renewed_at', now, 'expires_at', now + tonumber(ARGV[3]))
return 1
"""

#: The heartbeat's batch. KEYS: rec of each lease (any slots on one server;
#: on a Cluster the client sends one key per call). ARGV: secret, token,
#: ttl_ms for each key in turn. Returns one character per key, '1' renewed
#: or '0' refused, each judged as RENEW judges it, against one reading of the
#: server's clock: one string, which the client reads in one piece, where an
#: array costs it a parsed reply element per lease.
RENEW_MANY = _PRELUDE + """
local now = clock()
local out = {}
for i, rec in ipairs(KEYS) do
  local a = i * 3 - 2
  local f = redis.call('HMGET', rec, 'secret', 'token', 'expires_at')
  if f[1] == ARGV[a] and f[2] == ARGV[a + 1] and (tonumber(f[3]) or 0) > now then
    redis.call('HSET', rec, 'renewed_at', now, 'expires_at', now + tonumber(ARGV[a + 2]))
    out[i] = '1'
  else
    out[i] = '0'
  end
end
return table.concat(out)
"""

#: KEYS: rec, log, wake, waiting. ARGV: secret, token. Returns 1 when
#: released, and wakes the next waiter in the same step if one may wait.
#: The event carries the grant's meta, as the break's does: it places the
#: event in its DAG on the Leases page once the ``acquired`` event is trimmed.
RELEASE = _PRELUDE + """
local f = redis.call('HMGET', KEYS[1], 'secret', 'token', 'holder', 'meta')
if f[1] ~= ARGV[1] or f[2] ~= ARGV[2] or not f[3] then return 0 end
redis.call('HDEL', KEYS[1], 'holder', 'secret')
if f[4] then
  """ + _XADD + """'kind', 'released', 'token', ARGV[2], 'holder', f[3], 'meta', f[4])
else
  """ + _XADD + """'kind', 'released', 'token', ARGV[2], 'holder', f[3])
end
if redis.call('EXISTS', KEYS[4]) == 1 then wake() end
return 1
"""

#: KEYS: rec, log, wake. ARGV: by, token ('' for any). Returns the record as
#: it was before the break, or nil when there is none, or (with a token) when
#: the record carries another token or no holder: the check and the break are
#: one step. Always wakes a waiter: breaks are rare.
FORCE_RELEASE = _PRELUDE + """
local before = record((clock()))
if not before then return false end
if ARGV[2] ~= '' and (before[3] ~= ARGV[2] or not before[2]) then return false end
redis.call('HDEL', KEYS[1], 'holder', 'secret')
local fields = {'kind', 'broken', 'token', before[3], 'by', ARGV[1]}
if before[2] then table.insert(fields, 'holder'); table.insert(fields, before[2]) end
if before[8] then table.insert(fields, 'meta'); table.insert(fields, before[8]) end
""" + _XADD + """unpack(fields))
wake()
return before
"""

#: KEYS: rec. Returns the record or nil.
GET = _PRELUDE + """
return record((clock()))
"""

#: KEYS: rec, log. ARGV: the event's field/value pairs. Only for known keys.
RECORD_EVENT = _PRELUDE + """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
""" + _XADD + """unpack(ARGV))
return 1
"""

ALL = (ACQUIRE, RENEW, RENEW_MANY, RELEASE, FORCE_RELEASE, GET, RECORD_EVENT)
