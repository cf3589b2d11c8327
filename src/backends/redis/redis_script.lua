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
-- Replies (numbers as integer replies, which Redis converts from a Lua number exactly for any
-- integer below 2^53 and which cost no Lua string; an absent optional as nil):
--   claim    {"won", fence, lease_expiry} | {"done", result, fingerprint, expires_at}
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
--
-- The script's own work costs the server more than the Redis commands it sends, and every
-- Lua table, closure and string is an allocation: so the record lives in locals, not a
-- table, each operation only decides what to write, and one section at the end writes it
-- (bench: BENCHMARKS.md, "The Redis script's weight").
if redis.replicate_commands then
  redis.replicate_commands()  -- Redis < 5: allow TIME before writes (a no-op since 5)
end

local key = KEYS[1]
local op = ARGV[1]
local find, format, tonumber = string.find, string.format, tonumber
local kDecimal = '^%-?%d+$'  -- a decimal integer, as text

-- A decimal integer of at most 15 characters: exact as a Lua number (a double).
local function is_int(s)
  return type(s) == 'string' and #s <= 15 and find(s, kDecimal) ~= nil
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

local now
local server_clock = (ARGV[2] == '')
if server_clock then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = int_arg(2)
end

-- The stored record, read into locals. `live` is false when there is none or it is past
-- expires_at (reaped, whether or not Redis got to it yet); had_result / had_fingerprint say
-- whether the hash holds those fields even so, as the write deletes only a field that is there.
local state, fence_text, lease_text, expires_at, claim_token, result, fingerprint
local live, had_result, had_fingerprint = false, false, false
do
  local flat = redis.call('HGETALL', key)
  if #flat > 0 then
    local expires_text
    for i = 1, #flat, 2 do
      local name, value = flat[i], flat[i + 1]
      if name == 'state' then state = value
      elseif name == 'fence' then fence_text = value
      elseif name == 'lease_expiry' then lease_text = value
      elseif name == 'expires_at' then expires_text = value
      elseif name == 'claim_token' then claim_token = value
      elseif name == 'result' then result = value
      elseif name == 'fingerprint' then fingerprint = value
      end
    end
    had_result, had_fingerprint = result ~= nil, fingerprint ~= nil
    if (state ~= 'CLAIMED' and state ~= 'DONE') or not is_int(fence_text) or
        find(fence_text, '^[1-9]') == nil or not is_int(lease_text) or
        not is_int(expires_text) or claim_token == nil then
      error('idempotency script: the stored record is malformed', 0)
    end
    -- fence and lease_expiry are converted only where an operation needs their values.
    expires_at = tonumber(expires_text)
    live = now < expires_at
  end
end

-- A caller's fence: a decimal integer of any length, kept as text (compared, never converted).
local caller_fence = ARGV[3]
if op ~= 'claim' and (type(caller_fence) ~= 'string' or find(caller_fence, kDecimal) == nil) then
  caller_fence = nil
end

-- Each operation answers at once, or sets `reply` and the record to write: every field of it
-- (new_fence and new_lease_expiry a number, or the stored text when unchanged; new_result /
-- new_fingerprint nil for none), and `publish`, what to tell waiters.
local reply, publish
local new_state, new_fence, new_lease_expiry, new_expires_at, new_token, new_result, new_fingerprint

if op == 'claim' then
  local token = ARGV[3]
  local lease = int_arg(4)
  local ttl = int_arg(5)
  local fingerprint_arg = opt_arg(6)
  if lease <= 0 or ttl <= 0 then
    return redis.error_reply('ERR idempotency script: lease and ttl must be positive')
  end
  local fence = 0
  if live then
    if state == 'DONE' then
      return {'done', result or false, fingerprint or false, expires_at}
    end
    local lease_expiry
    fence, lease_expiry = tonumber(fence_text), tonumber(lease_text)
    -- A retried claim call finds its own live claim: re-affirm it, same fence, nothing written.
    -- A lapsed one is reclaimed below; a released one has no token left.
    if token ~= '' and claim_token == token and now < lease_expiry then
      return {'won', fence, lease_expiry}
    end
    if now < lease_expiry then
      return {'held', lease_expiry, fingerprint or false}
    end
  end
  -- Absent, or the holder's lease lapsed (it crashed or gave up): take it, fence + 1.
  new_state, new_fence, new_lease_expiry, new_expires_at = 'CLAIMED', fence + 1, now + lease,
      now + lease + ttl
  new_token, new_result, new_fingerprint = token, nil, fingerprint_arg
  reply = {'won', new_fence, new_lease_expiry}

elseif op == 'complete' then
  local ttl = int_arg(4)
  local result_arg = opt_arg(5)
  if caller_fence == nil or ttl <= 0 then
    return redis.error_reply('ERR idempotency script: bad fence or ttl')
  end
  if not live or fence_text ~= caller_fence then return {'complete', 0} end
  if state == 'DONE' then return {'complete', 1} end
  -- No lease guard: until someone reclaims, the lapsed holder is the only one that ran.
  new_state, new_fence, new_lease_expiry, new_expires_at = 'DONE', fence_text, lease_text,
      now + ttl
  new_token, new_result, new_fingerprint = claim_token, result_arg, fingerprint
  reply, publish = {'complete', 1}, 'complete'  -- wakes wait_for_change() in other processes

elseif op == 'release' then
  local ttl = int_arg(4)
  if caller_fence == nil or ttl <= 0 then
    return redis.error_reply('ERR idempotency script: bad fence or ttl')
  end
  if not live or fence_text ~= caller_fence or state == 'DONE' then
    return {'release', 0}
  end
  -- Advancing the fence kills the released claim; keeping the record keeps the fence. Nobody
  -- holds the new fence, so the token is cleared: no retried claim may re-affirm it.
  new_state, new_fence, new_lease_expiry, new_expires_at = 'CLAIMED', tonumber(fence_text) + 1,
      now, math.max(expires_at, now + ttl)
  new_token, new_result, new_fingerprint = '', result, fingerprint
  reply, publish = {'release', 1}, 'release'

elseif op == 'extend' then
  local token = ARGV[4]
  local lease = int_arg(5)
  local ttl = int_arg(6)
  if caller_fence == nil or lease <= 0 or ttl <= 0 then
    return redis.error_reply('ERR idempotency script: bad fence, lease or ttl')
  end
  -- Fence and token: a reclaim moved the fence, a release moved it and cleared the token.
  -- Past the lease is fine while nobody reclaimed, as complete has no lease guard.
  if not live or fence_text ~= caller_fence or state ~= 'CLAIMED' or token == '' or
      claim_token ~= token then
    return {'extend', false}
  end
  new_state, new_fence, new_lease_expiry = 'CLAIMED', fence_text, now + lease
  new_expires_at = math.max(expires_at, now + lease + ttl)
  new_token, new_result, new_fingerprint = claim_token, result, fingerprint
  reply = {'extend', new_lease_expiry}

else
  return redis.error_reply('ERR idempotency script: unknown operation')
end

-- The write: the record overwritten in place (HSET, then HDEL of an optional field it had and
-- no longer has), never deleted and re-created. On a Redis Cluster node whose slot is
-- migrating, a key that stops existing mid-script makes the next write fail with "non local
-- key" after the DEL already took effect (scripts are not rolled back), which lost the record
-- and let a second claimant win (RedisCluster.ReshardingTheKeysSlotsUnderLoadLosesAndDoublesNoClaim).
local f = type(new_fence) == 'string' and new_fence or format('%d', new_fence)
local l = type(new_lease_expiry) == 'string' and new_lease_expiry or format('%d', new_lease_expiry)
local e = format('%d', new_expires_at)
-- One HSET of a fixed shape per case: no argument table to build and unpack.
if new_result and new_fingerprint then
  redis.call('HSET', key, 'state', new_state, 'fence', f, 'lease_expiry', l, 'expires_at', e,
             'claim_token', new_token, 'result', new_result, 'fingerprint', new_fingerprint)
elseif new_result then
  redis.call('HSET', key, 'state', new_state, 'fence', f, 'lease_expiry', l, 'expires_at', e,
             'claim_token', new_token, 'result', new_result)
elseif new_fingerprint then
  redis.call('HSET', key, 'state', new_state, 'fence', f, 'lease_expiry', l, 'expires_at', e,
             'claim_token', new_token, 'fingerprint', new_fingerprint)
else
  redis.call('HSET', key, 'state', new_state, 'fence', f, 'lease_expiry', l, 'expires_at', e,
             'claim_token', new_token)
end
local drop_result = had_result and not new_result
local drop_fingerprint = had_fingerprint and not new_fingerprint
if drop_result and drop_fingerprint then
  redis.call('HDEL', key, 'result', 'fingerprint')
elseif drop_result then
  redis.call('HDEL', key, 'result')
elseif drop_fingerprint then
  redis.call('HDEL', key, 'fingerprint')
end
if server_clock then
  redis.call('PEXPIREAT', key, e)
else
  -- An injected clock is not the server's, so its instants mean nothing to PEXPIREAT: keep
  -- the remaining lifetime instead, plus 10 min of slack, because Redis counts it in real
  -- time while the injected clock may crawl (a test's manual clock). The record is judged
  -- expired by the injected clock alone (see `live`); the slack only delays the reaping.
  redis.call('PEXPIRE', key, format('%d', new_expires_at - now + 600000))
end
if publish then redis.call('PUBLISH', key, publish) end
return reply
