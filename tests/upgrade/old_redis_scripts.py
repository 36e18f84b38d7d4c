"""The Redis store's Lua as released before the Stream history (commit 5886a6c),
frozen: the "old version" of the rolling-upgrade test. Do not edit: it
stands for processes still running that code while others are upgraded."""


HISTORY_LIMIT = 100

#: History is trimmed back to HISTORY_LIMIT once it is this much longer.
TRIM_SLACK = 32

#: How long a wake-up nobody took stays (milliseconds): a waiter between two
#: BLPOPs still finds it; LeaseLock polls as well, so it need not be longer.
WAKE_TTL_MS = 10_000

# Shared helpers, prepended to every script. KEYS[1] = rec, KEYS[2] = hist.
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
-- Wake the next waiter (KEYS[3], a list waiters BLPOP on): one element, so
-- one waiter wakes, in the order they blocked. DEL first, so releases nobody
-- waited for leave at most one stale wake-up behind; the list carries no
-- lease state, so it may expire (and must: nothing else removes it).
local function wake()
  redis.call('DEL', KEYS[3])
  redis.call('RPUSH', KEYS[3], '1')
  redis.call('PEXPIRE', KEYS[3], """ + str(WAKE_TTL_MS) + """)
end
-- Append one event; trim only now and then. head is the JSON object's start.
-- The constants are part of the script text, not arguments: every argument
-- costs the client an encode per call.
local function push_event(head, token, now)
  local n = redis.call('RPUSH', KEYS[2], head .. ',"token":' .. token .. ',"at":' .. fmt(now) .. '}')
  if n > """ + str(HISTORY_LIMIT + TRIM_SLACK) + """ then
    redis.call('LTRIM', KEYS[2], -""" + str(HISTORY_LIMIT) + """, -1)
  end
end
"""

#: KEYS: rec, hist. ARGV: holder, secret, ttl_ms, meta_json.
#: Returns {1, token, now, expires} when granted, the busy record otherwise.
#: A record whose expires_at cannot be read as a number counts as held (the
#: client then reports it as corrupt) rather than be granted over.
ACQUIRE = _PRELUDE + """
local now, now_us = clock()
local f = redis.call('HMGET', KEYS[1], 'holder', 'token', 'expires_at')
-- A grant over a record that still names a holder takes over an expired
-- lease: the event names the token and holder it replaced.
local took = ''
if f[1] then
  local expires = tonumber(f[3])
  if expires == nil or expires > now then return record(now) end
  took = ', "took_over": {"token": ' .. fmt(tonumber(f[2]) or 0) .. ', "holder": ' ..
         cjson.encode(f[1]) .. '}'
end
local token = math.max((tonumber(f[2]) or 0) + 1, now_us)
local expires = now + tonumber(ARGV[3])
local t = fmt(token)
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'secret', ARGV[2], 'token', t, 'acquired_at', now,
           'renewed_at', now, 'expires_at', expires, 'meta', ARGV[4])
push_event('{"kind": "acquired", "holder": ' .. cjson.encode(ARGV[1]) ..
           ', "detail": {"meta": ' .. ARGV[4] .. took .. '}', t, now)
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
#: ttl_ms for each key in turn. Returns one 1/0 per key, each judged as RENEW
#: judges it, against one reading of the server's clock.
RENEW_MANY = _PRELUDE + """
local now = clock()
local out = {}
for i, rec in ipairs(KEYS) do
  local a = i * 3 - 2
  local f = redis.call('HMGET', rec, 'secret', 'token', 'expires_at')
  if f[1] == ARGV[a] and f[2] == ARGV[a + 1] and (tonumber(f[3]) or 0) > now then
    redis.call('HSET', rec, 'renewed_at', now, 'expires_at', now + tonumber(ARGV[a + 2]))
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
"""

#: KEYS: rec, hist, wake. ARGV: secret, token, channel. Returns 1 when released; wakes the next waiter (and
#: publishes the release for pub/sub listeners) in the same step.
RELEASE = _PRELUDE + """
local f = redis.call('HMGET', KEYS[1], 'secret', 'token', 'holder')
if f[1] ~= ARGV[1] or f[2] ~= ARGV[2] or not f[3] then return 0 end
local now = clock()
redis.call('HDEL', KEYS[1], 'holder', 'secret')
push_event('{"kind": "released", "detail": {}, "holder": ' .. cjson.encode(f[3]), ARGV[2], now)
wake()
redis.pcall('PUBLISH', ARGV[3], 'released')  -- best effort: waiters also poll
return 1
"""

#: KEYS: rec, hist, wake. ARGV: event_head (without holder), channel, token
#: ('' for any). Returns the record as it was before the break, or nil when
#: there is none, or (with a token) when the record carries another token or
#: no holder: the check and the break are one step.
FORCE_RELEASE = _PRELUDE + """
local now = clock()
local before = record(now)
if not before then return false end
if ARGV[3] ~= '' and (before[3] ~= ARGV[3] or not before[2]) then return false end
redis.call('HDEL', KEYS[1], 'holder', 'secret')
local holder = 'null'
if before[2] then holder = cjson.encode(before[2]) end
push_event(ARGV[1] .. ',"holder":' .. holder, before[3], now)
wake()
redis.pcall('PUBLISH', ARGV[2], 'released')
return before
"""

#: KEYS: rec. Returns the record or nil.
GET = _PRELUDE + """
return record((clock()))
"""

#: KEYS: rec, hist. ARGV: event_head, token. Only for known keys.
RECORD_EVENT = _PRELUDE + """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
push_event(ARGV[1], ARGV[2], (clock()))
return 1
"""

ALL = (ACQUIRE, RENEW, RENEW_MANY, RELEASE, FORCE_RELEASE, GET, RECORD_EVENT)
