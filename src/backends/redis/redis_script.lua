-- The record state machine of src/core/transition.cc, re-expressed for Redis: one call is
-- one claim, complete, release or extend on one key, decided atomically on the server.
--
-- KEYS[1]  the record's hash
-- ARGV[1]  "claim" | "complete" | "release" | "extend"
-- ARGV[2]  now, epoch ms of an injected client clock; "" judges by the server's TIME
-- claim:    ARGV[3] claim token, ARGV[4] lease ms, ARGV[5] ttl ms, ARGV[6] fingerprint
-- complete: ARGV[3] fence, ARGV[4] ttl ms, ARGV[5] result
-- release:  ARGV[3] fence, ARGV[4] ttl ms
-- extend:   ARGV[3] fence, ARGV[4] claim token, ARGV[5] lease ms, ARGV[6] ttl ms
-- An optional value travels as "-" (none) or "+" followed by its bytes.
--
-- Replies (numbers as decimal strings; an absent optional as nil):
--   claim    {"won", fence, lease_expiry} | {"done", result, fingerprint}
--            | {"held", lease_expiry, fingerprint}
--   complete {"complete", 1 | 0}   release {"release", 1 | 0}
--   extend   {"extend", lease_expiry} | {"extend", nil}
--
-- The hash holds state (CLAIMED | DONE), fence, lease_expiry, expires_at, claim_token and,
-- when present, result and fingerprint. Every write sets the key's expiry to expires_at, so
-- Redis deletes the record exactly when its retention ends. A record at or past expires_at
-- is therefore treated as absent here too (a claim restarts at fence 1): the answers are
-- the same whether or not Redis has reaped it yet, and an injected clock may run at any pace.
-- complete and release also PUBLISH on a channel named like the key, which
-- RedisLock::wait_for_change() subscribes to. Lua numbers are doubles: exact for epoch ms
-- and any real fence; a caller's fence is compared as text, never converted.
if redis.replicate_commands then
  redis.replicate_commands()  -- Redis < 5: allow TIME before writes (a no-op since 5)
end

local kInjectedClockSlackMs = 600000  -- 10 min; see store()
local key = KEYS[1]
local op = ARGV[1]
local find, format = string.find, string.format

-- A decimal integer of at most 15 digits: exact as a Lua number (a double). find, not match:
-- a check that builds no strings, since the script's own cost is most of a call's (the Redis
-- commands in it are a third).
local function is_int(s)
  return type(s) == 'string' and find(s, '^%-?%d+$') ~= nil and
      #s <= (find(s, '^%-') and 16 or 15)
end

-- A decimal integer of any length (a fence is compared as text, never converted).
local function is_digits(s)
  return type(s) == 'string' and find(s, '^%-?%d+$') ~= nil
end

local function int_arg(i)
  local s = ARGV[i]
  if not is_int(s) then
    error('idempotency script: argument ' .. i .. ' is not an integer', 0)
  end
  return tonumber(s)
end

local function opt_arg(i)
  local s = ARGV[i]
  if s == '-' then return nil end
  if type(s) == 'string' and find(s, '^%+') then return string.sub(s, 2) end
  error('idempotency script: argument ' .. i .. ' is not an optional', 0)
end

local function fmt(n) return format('%d', n) end

local now
local server_clock = (ARGV[2] == '')
if server_clock then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = int_arg(2)
end

-- Whether the stored hash has a result / a fingerprint field, live or expired: store() deletes
-- only a field that is there, as an HDEL of nothing still costs a call.
local had_result, had_fingerprint = false, false

-- The stored record, or nil when there is none or it is past expires_at.
local function load()
  local flat = redis.call('HGETALL', key)
  if #flat == 0 then return nil end
  local rec = {}
  for i = 1, #flat, 2 do rec[flat[i]] = flat[i + 1] end
  had_result, had_fingerprint = rec.result ~= nil, rec.fingerprint ~= nil
  local fence = rec.fence
  if (rec.state ~= 'CLAIMED' and rec.state ~= 'DONE') or not is_int(fence) or
      find(fence, '^[1-9]') == nil or not is_int(rec.lease_expiry) or
      not is_int(rec.expires_at) or rec.claim_token == nil then
    error('idempotency script: the stored record is malformed', 0)
  end
  rec.fence_text = fence
  rec.fence = tonumber(fence)
  rec.lease_expiry = tonumber(rec.lease_expiry)
  rec.expires_at = tonumber(rec.expires_at)
  if now >= rec.expires_at then return nil end  -- reaped, whether or not Redis got to it yet
  return rec
end

-- The record is overwritten in place (HSET, then HDEL of an optional field it lacks), never
-- deleted and re-created: on a Redis Cluster node whose slot is migrating, a key that stops
-- existing mid-script makes the next write fail with "non local key" after the DEL already
-- took effect (scripts are not rolled back), which lost the record and let a second claimant
-- win (RedisCluster.ReshardingTheKeysSlotsUnderLoadLosesAndDoublesNoClaim).
local function store(rec)
  local result, fingerprint = rec.result, rec.fingerprint
  local state, fence, lease_expiry = rec.state, fmt(rec.fence), fmt(rec.lease_expiry)
  local expires_at, token = fmt(rec.expires_at), rec.claim_token
  -- One HSET of a fixed shape per case: no argument table to build and unpack.
  if result and fingerprint then
    redis.call('HSET', key, 'state', state, 'fence', fence, 'lease_expiry', lease_expiry,
               'expires_at', expires_at, 'claim_token', token, 'result', result,
               'fingerprint', fingerprint)
  elseif result then
    redis.call('HSET', key, 'state', state, 'fence', fence, 'lease_expiry', lease_expiry,
               'expires_at', expires_at, 'claim_token', token, 'result', result)
  elseif fingerprint then
    redis.call('HSET', key, 'state', state, 'fence', fence, 'lease_expiry', lease_expiry,
               'expires_at', expires_at, 'claim_token', token, 'fingerprint', fingerprint)
  else
    redis.call('HSET', key, 'state', state, 'fence', fence, 'lease_expiry', lease_expiry,
               'expires_at', expires_at, 'claim_token', token)
  end
  local drop_result, drop_fingerprint = had_result and not result, had_fingerprint and not fingerprint
  if drop_result and drop_fingerprint then
    redis.call('HDEL', key, 'result', 'fingerprint')
  elseif drop_result then
    redis.call('HDEL', key, 'result')
  elseif drop_fingerprint then
    redis.call('HDEL', key, 'fingerprint')
  end
  if server_clock then
    redis.call('PEXPIREAT', key, expires_at)
  else
    -- An injected clock is not the server's, so its instants mean nothing to PEXPIREAT:
    -- keep the remaining lifetime instead, plus slack, because Redis counts it in real time
    -- while the injected clock may crawl (a test's manual clock). The record is judged
    -- expired by the injected clock alone (see load()); the slack only delays the reaping.
    redis.call('PEXPIRE', key, fmt(rec.expires_at - now + kInjectedClockSlackMs))
  end
end

local rec = load()

if op == 'claim' then
  local token = ARGV[3]
  local lease = int_arg(4)
  local ttl = int_arg(5)
  local fingerprint = opt_arg(6)
  if lease <= 0 or ttl <= 0 then
    return redis.error_reply('ERR idempotency script: lease and ttl must be positive')
  end
  -- A retried claim call finds its own live claim: re-affirm it, same fence, nothing written.
  -- A lapsed one is reclaimed below; a released one has no token left.
  if rec and rec.state == 'CLAIMED' and token ~= '' and rec.claim_token == token and
      now < rec.lease_expiry then
    return {'won', fmt(rec.fence), fmt(rec.lease_expiry)}
  end
  if rec and rec.state == 'DONE' then
    return {'done', rec.result or false, rec.fingerprint or false, fmt(rec.expires_at)}
  end
  if rec and now < rec.lease_expiry then
    return {'held', fmt(rec.lease_expiry), rec.fingerprint or false}
  end
  -- Absent, or the holder's lease lapsed (it crashed or gave up): take it, fence + 1.
  local fence = 1
  if rec then fence = rec.fence + 1 end
  store({state = 'CLAIMED', fence = fence, lease_expiry = now + lease,
         expires_at = now + lease + ttl, claim_token = token, fingerprint = fingerprint})
  return {'won', fmt(fence), fmt(now + lease)}
end

if op == 'complete' then
  local fence = ARGV[3]
  local ttl = int_arg(4)
  local result = opt_arg(5)
  if not is_digits(fence) or ttl <= 0 then
    return redis.error_reply('ERR idempotency script: bad fence or ttl')
  end
  if rec == nil or rec.fence_text ~= fence then return {'complete', 0} end
  if rec.state == 'DONE' then return {'complete', 1} end
  -- No lease guard: until someone reclaims, the lapsed holder is the only one that ran.
  rec.state = 'DONE'
  rec.result = result
  rec.expires_at = now + ttl
  store(rec)
  redis.call('PUBLISH', key, 'complete')  -- wakes wait_for_change() in other processes
  return {'complete', 1}
end

if op == 'release' then
  local fence = ARGV[3]
  local ttl = int_arg(4)
  if not is_digits(fence) or ttl <= 0 then
    return redis.error_reply('ERR idempotency script: bad fence or ttl')
  end
  if rec == nil or rec.fence_text ~= fence or rec.state == 'DONE' then
    return {'release', 0}
  end
  -- Advancing the fence kills the released claim; keeping the record keeps the fence.
  rec.lease_expiry = now
  rec.fence = rec.fence + 1
  rec.claim_token = ''  -- nobody holds the new fence: no token may re-affirm it
  rec.expires_at = math.max(rec.expires_at, now + ttl)
  store(rec)
  redis.call('PUBLISH', key, 'release')
  return {'release', 1}
end

if op == 'extend' then
  local fence = ARGV[3]
  local token = ARGV[4]
  local lease = int_arg(5)
  local ttl = int_arg(6)
  if not is_digits(fence) or lease <= 0 or ttl <= 0 then
    return redis.error_reply('ERR idempotency script: bad fence, lease or ttl')
  end
  -- Fence and token: a reclaim moved the fence, a release moved it and cleared the token.
  -- Past the lease is fine while nobody reclaimed, as complete has no lease guard.
  if rec == nil or rec.fence_text ~= fence or rec.state ~= 'CLAIMED' or token == '' or
      rec.claim_token ~= token then
    return {'extend', false}
  end
  rec.lease_expiry = now + lease
  rec.expires_at = math.max(rec.expires_at, now + lease + ttl)
  store(rec)
  return {'extend', fmt(rec.lease_expiry)}
end

return redis.error_reply('ERR idempotency script: unknown operation')
