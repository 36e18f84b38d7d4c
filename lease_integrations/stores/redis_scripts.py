"""The Redis store's Lua: each lease operation is one script, so it is one
atomic step on the server and one round trip from the client.

Keys of one lease (all share the hash tag ``{prefix:key}``, so they live in
one Redis Cluster slot and one script may touch them all):

- ``…:lease``  the live lease: value = token, expiry = ``PX`` (the server's clock)
- ``…:rec``    persistent hash: holder, token, times (ms), meta JSON; the
  holder field is deleted on release, so ``get`` can tell held, expired and
  released apart after the ``…:lease`` key is gone
- ``…:ctr``    persistent fencing counter: never expires, never deleted, so a
  token is never issued twice even after expiry, release or eviction
- ``…:hist``   capped list of JSON events, appended by the same scripts

Times come from ``redis.call('TIME')``: every record is judged on the store's
clock, never a worker's.
"""

from __future__ import annotations

# Shared helpers, prepended to every script. KEYS[1] = lease, KEYS[2] = rec.
_PRELUDE = """
local function fmt(n) return string.format('%.0f', n) end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- The record as {holder|false, token, acquired, renewed, expires, now, meta}.
-- A holder whose lease key is gone (PX expiry, eviction, DEL) reads as expired.
-- Redis keeps a key through the millisecond it expires in (PTTL 0): a key that
-- still exists reads as held (expiry at least now + 1 ms), so "expired" here
-- always means the next GET finds nothing and a renew is refused.
local function record(now)
  local f = redis.call('HMGET', KEYS[2], 'holder', 'token', 'acquired_at',
                       'renewed_at', 'expires_at', 'meta')
  if not f[2] then return false end
  local expires = tonumber(f[5])
  if f[1] then
    local pttl = redis.call('PTTL', KEYS[1])
    if pttl >= 0 then expires = now + math.max(pttl, 1) elseif expires > now then expires = now end
  end
  return {f[1], tonumber(f[2]), tonumber(f[3]), tonumber(f[4]), expires, now, f[6]}
end
-- Append one event: head is the JSON object's start, built by the caller.
local function push_event(list, head, token, now, limit)
  redis.call('RPUSH', list, head .. ',"token":' .. fmt(token) .. ',"at":' .. fmt(now) .. '}')
  redis.call('LTRIM', list, -tonumber(limit), -1)
end
"""

#: KEYS: lease, rec, ctr, hist. ARGV: holder, ttl_ms, meta_json, event_head, limit.
#: Returns {1, record} when granted, {0, record|nil} when busy.
ACQUIRE = _PRELUDE + """
local now = now_ms()
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, record(now)} end
local last = tonumber(redis.call('GET', KEYS[3]) or '0')
local prev = tonumber(redis.call('HGET', KEYS[2], 'token') or '0')
local token = math.max(last, prev) + 1
local ttl = tonumber(ARGV[2])
redis.call('SET', KEYS[3], fmt(token))
redis.call('SET', KEYS[1], fmt(token), 'PX', ttl)
redis.call('HSET', KEYS[2], 'holder', ARGV[1], 'token', fmt(token), 'acquired_at', fmt(now),
           'renewed_at', fmt(now), 'expires_at', fmt(now + ttl), 'meta', ARGV[3])
push_event(KEYS[4], ARGV[4], token, now, ARGV[5])
return {1, {ARGV[1], token, now, now, now + ttl, now, ARGV[3]}}
"""

#: KEYS: lease, rec. ARGV: holder, token, ttl_ms. Returns 1 when renewed.
#: A lease key that is gone (expired) is never recreated: no resurrection.
RENEW = _PRELUDE + """
if redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end
if redis.call('HGET', KEYS[2], 'holder') ~= ARGV[1] then return 0 end
local now = now_ms()
local ttl = tonumber(ARGV[3])
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('HSET', KEYS[2], 'renewed_at', fmt(now), 'expires_at', fmt(now + ttl))
return 1
"""

#: KEYS: lease, rec, hist. ARGV: holder, token, event_head, limit, channel.
#: Returns 1 when released; wakes waiters in the same step.
RELEASE = _PRELUDE + """
local f = redis.call('HMGET', KEYS[2], 'holder', 'token')
if f[1] ~= ARGV[1] or f[2] ~= ARGV[2] then return 0 end
local now = now_ms()
redis.call('HDEL', KEYS[2], 'holder')
redis.call('DEL', KEYS[1])
push_event(KEYS[3], ARGV[3], tonumber(ARGV[2]), now, ARGV[4])
redis.pcall('PUBLISH', ARGV[5], 'released')  -- best effort: waiters also poll
return 1
"""

#: KEYS: lease, rec, hist. ARGV: event_head (without holder), limit, channel.
#: Returns the record as it was before the break, or nil when there is none.
FORCE_RELEASE = _PRELUDE + """
local now = now_ms()
local before = record(now)
if not before then return false end
redis.call('HDEL', KEYS[2], 'holder')
redis.call('DEL', KEYS[1])
local holder = 'null'
if before[1] then holder = cjson.encode(before[1]) end
push_event(KEYS[3], ARGV[1] .. ',"holder":' .. holder, before[2], now, ARGV[2])
redis.pcall('PUBLISH', ARGV[3], 'released')
return before
"""

#: KEYS: lease, rec. Returns the record or nil.
GET = _PRELUDE + """
return record(now_ms())
"""

#: KEYS: lease, rec, hist. ARGV: event_head, token, limit. Only for known keys.
RECORD_EVENT = _PRELUDE + """
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
push_event(KEYS[3], ARGV[1], tonumber(ARGV[2]), now_ms(), ARGV[3])
return 1
"""

ALL = (ACQUIRE, RENEW, RELEASE, FORCE_RELEASE, GET, RECORD_EVENT)
