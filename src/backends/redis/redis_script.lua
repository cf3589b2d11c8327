-- The record state machine of src/core/transition.cc, re-expressed for Redis: one call is
-- one claim, complete, release, extend or inspect on one key, decided atomically on the server.
--
-- KEYS[1]  the record's key
-- ARGV[1]  "claim" | "complete" | "release" | "extend" | "inspect" | "complete_many" (below:
--          KEYS[1..n] and ARGV[2..n + 2] its own)
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
--   complete "complete:1" | "complete:0"   release "release:1" | "release:0": a constant
--            string, which Lua interns when it compiles the script, where a table reply is an
--            allocation and its conversion (5.7k instructions of a complete's 86k)
--   extend   {"extend", lease_expiry} | {"extend", nil}
--   complete_many  {1 | 0, ...}: a key's complete done, or left to its own complete call
--   inspect  nil | {state, fence, lease_expiry, expires_at, claim_token, result, fingerprint}:
--            the record as stored (past expires_at too), its numbers as text
--
-- The record is one string: a header line, then its strings back to back (the result may hold
-- any bytes),
--   "<C|D> <fence> <lease_expiry> <expires_at> <token bytes> <fingerprint bytes> <result
--   bytes>\n" .. claim_token .. fingerprint .. result
-- with -1 bytes for an absent fingerprint or result. A fresh claim may also be made without
-- the script, by the client's SET NX PX GET (a sixth of a script call's cost to the server):
--   "F <expires_at - lease_expiry> <token bytes> <fingerprint bytes>\n" .. token .. fingerprint
-- is fence 1, CLAIMED, with expires_at the key's own expiry (PEXPIRETIME: Redis 7; before
-- it, now + PTTL, as the client writes this form only until its first PEXPIRETIME is refused).
-- A complete of such a record writes
--   "E <fence> <lease_expiry> <token bytes> <fingerprint bytes> <result bytes>\n" .. claim_token
--   .. fingerprint .. result
-- DONE, its expires_at again the key's own expiry (set by SET ... PX ttl), so that the
-- complete reads no clock.
-- The client also reads what SET ... GET returns, in every form (decode_stored_record), and answers
-- from it a claim that writes nothing. A hash (state, fence, lease_expiry, expires_at, claim_token,
-- result, fingerprint) is a record of an earlier version of this script: read as well, and stored
-- as a string by the next write. Every write sets the key's expiry to expires_at, so Redis deletes
-- the record exactly when its retention ends. A record at or past expires_at is therefore treated
-- as absent here too (a claim restarts at fence 1): the answers are the same whether or not Redis
-- has reaped it yet, and an injected clock may run at any pace. complete and release also PUBLISH
-- on a channel named like the key, which RedisLock::wait_for_change() subscribes to. Lua numbers
-- are doubles: exact for epoch ms and any real fence; a caller's fence is compared as text, never
-- converted.
--
-- The script's own work costs the server more than the Redis commands it sends, and every
-- Lua table, closure and string is an allocation: so the record lives in locals, not a
-- table, each operation only decides what to write, and one section at the end writes it
-- (bench: BENCHMARKS.md, "The Redis script's weight"). Under Redis's Lua 5.1 a call of a C
-- function (tonumber, string.find, string.format) costs ~500-1,500 instructions and the
-- header line is a dozen of them: so a number already checked to be decimal text is
-- converted by arithmetic (`text + 0`), a field the pattern already read as digits is not
-- matched again, text that does not change is written back as it was read, and the new
-- record is joined with `..`, never formatted (BENCHMARKS.md, "A lighter script body").
if redis.replicate_commands then
  redis.replicate_commands()  -- Redis < 5: allow TIME before writes (a no-op since 5)
end

local key = KEYS[1]
local op = ARGV[1]
local byte, find, format, match, sub, tonumber = string.byte, string.find, string.format,
    string.match, string.sub, tonumber
local kDecimal = '^%-?%d+$'  -- a decimal integer, as text
-- The string record's header lines (above): each capture a decimal, then where its strings start.
local kFull = '^[CD] (%d+) (%-?%d+) (%-?%d+) (%d+) (%-?%d+) (%-?%d+)\n()'
local kFresh = '^F (%d+) (%d+) (%-?%d+)\n()'
local kDoneByKey = '^E (%d+) (%-?%d+) (%d+) (%-?%d+) (%-?%d+)\n()'

-- The complete of a fresh-form record (its claim was the client's SET NX PX GET) by the
-- server's clock, with fence 1, a ttl and a result as they should be: nearly every complete.
-- It writes the DONE record in the form whose expires_at is its key's expiry, by SET ... PX
-- ttl, so no clock is read and no PEXPIREAT sent: GET, PTTL, PEXPIRETIME, SET and PUBLISH
-- instead of TIME, GET, PEXPIRETIME, SET, PEXPIREAT and PUBLISH, and none of the general
-- path's decoding (BENCHMARKS.md, "A complete in five commands"). Anything else, and a
-- record at its expires_at, goes on to the general path below, which answers it.
--
-- complete_many is that path for several keys in one call, each key's complete on its own:
-- KEYS[1..n], ARGV[2] the ttl, ARGV[2 + i] KEYS[i]'s result (fence 1, the server's clock). The
-- call's own cost (~20k instructions of a complete's ~65k) is paid once for all n, and so is a
-- TIME instead of a PTTL a key, where the client joins the completes queued for one write
-- (RedisLock's complete_async, one node; at most 64, a script runs alone on the server). Its
-- reply is n integers: 1 where the key was completed here, 0 where it was left untouched for
-- the general path, to which the client then sends that key's complete.
local stored  -- GET's reply, when the path below read it first (nil: not read yet)
local many = op == 'complete_many'
if many or (op == 'complete' and ARGV[2] == '' and ARGV[3] == '1') then
  local ttl = many and ARGV[2] or ARGV[4]
  local ttl_ok  -- checked when a key first needs it
  local completed = many and {} or nil
  -- complete_many judges each key's liveness by the server's TIME, read once for them all (the
  -- general path's `now`), where a lone complete asks its key's PTTL, which costs as much.
  local now_ms
  if many then
    local t = redis.call('TIME')
    local us = t[2] + 0
    now_ms = t[1] * 1000 + (us - us % 1000) / 1000
  end
  for i = 1, many and #KEYS or 1 do
    local k, result_arg, done = KEYS[i], ARGV[many and 2 + i or 5], false
    stored = redis.pcall('GET', k)
    local raw = stored
    if type(raw) == 'string' and byte(raw) == 70 and  -- 'F'
        (result_arg == '-' or (result_arg ~= nil and byte(result_arg) == 43)) then  -- '+'
      -- The ttl as SET ... PX takes it: is_int's check, written out (the helpers below are
      -- made only past this path; making one here cost a complete 1.7k), and no leading zero
      -- (the general path reads '05' as 5; SET would refuse it).
      if ttl_ok == nil then
        ttl_ok = ttl ~= nil and #ttl <= 15 and find(ttl, kDecimal) ~= nil and
            byte(ttl) ~= 48 and ttl + 0 > 0  -- '0'
      end
      -- Its header as the general path reads it (a malformed one goes on to be refused
      -- there), its key's expiry (PEXPIRETIME refused, before Redis 7: the general path, which
      -- reads PTTL instead), and live while its key has time left: PTTL is 0 at expires_at
      -- itself, where it is absent. PTTL is in PEXPIRETIME's ACL categories (@keyspace,
      -- @read, @fast).
      local offset, token_len, fingerprint_len, at
      if ttl_ok then offset, token_len, fingerprint_len, at = match(raw, kFresh) end
      local fingerprint_bytes = fingerprint_len == '-1' and 0 or tonumber(fingerprint_len)
      local expiry = offset ~= nil and #offset <= 15 and fingerprint_bytes >= 0 and
          at + token_len + fingerprint_bytes - 1 == #raw and redis.pcall('PEXPIRETIME', k)
      if type(expiry) == 'number' and expiry >= 0 and
          (many and now_ms < expiry or not many and redis.call('PTTL', k) > 0) then
        local lease_expiry = expiry - offset
        local result = result_arg ~= '-' and sub(result_arg, 2) or nil
        redis.call('SET', k, 'E 1 ' .. format('%d', lease_expiry) .. ' ' .. token_len .. ' ' ..
            fingerprint_len .. ' ' .. (result and format('%d', #result) or '-1') .. '\n' ..
            sub(raw, at) .. (result or ''), 'PX', ttl)
        redis.pcall('PUBLISH', k, 'complete')  -- see the last line
        done = true
      end
    end
    if many then
      completed[i] = done and 1 or 0
    elseif done then
      return 'complete:1'
    end
  end
  if many then return completed end
end

-- A decimal integer of at most 15 characters: exact as a Lua number (a double). Arguments and
-- hash fields are strings or nil.
local function is_int(s)
  return s ~= nil and #s <= 15 and find(s, kDecimal) ~= nil
end

local function int_arg(i)
  local s = ARGV[i]
  if not is_int(s) then
    error('idempotency script: argument ' .. i .. ' is not an integer', 0)
  end
  return s + 0
end

local function opt_arg(i)
  local s = ARGV[i]
  if s == '-' then return nil end
  if s ~= nil and byte(s) == 43 then return sub(s, 2) end  -- '+'
  error('idempotency script: argument ' .. i .. ' is not an optional', 0)
end

local now
local server_clock = (ARGV[2] == '')
if server_clock then
  local t = redis.call('TIME')
  local us = t[2] + 0  -- TIME's two decimals; arithmetic, not tonumber, converts them
  now = t[1] * 1000 + (us - us % 1000) / 1000
else
  now = int_arg(2)
end

-- The stored record, read into locals. `live` is false when there is none or it is past
-- expires_at (reaped, whether or not Redis got to it yet). lease_expiry is kept as read: text
-- (lease_text) from a header line or a hash, a number (lease_number) from the fresh form. The
-- header's three lengths are kept as their text too, to be written back unchanged.
local state, fence_text, lease_text, lease_number, expires_at, claim_token, result, fingerprint
local token_len_text, fingerprint_len_text, result_len_text
local live = false
local function malformed()
  error('idempotency script: the stored record is malformed', 0)
end
do
  local raw = stored
  if raw == nil then raw = redis.pcall('GET', key) end
  if type(raw) == 'table' then
    -- A hash, written by an earlier version of this script (or an error, passed on as it is).
    if raw.err == nil or find(raw.err, '^WRONGTYPE') == nil then return raw end
    local flat = redis.call('HGETALL', key)
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
    if (state ~= 'CLAIMED' and state ~= 'DONE') or not is_int(expires_text) or
        not is_int(fence_text) or find(fence_text, '^[1-9]') == nil or not is_int(lease_text) or
        claim_token == nil then
      malformed()
    end
    expires_at = tonumber(expires_text)
  elseif raw then
    -- The patterns read each number as digits: only the lengths of the texts are checked.
    local form = byte(raw)
    local fence, lease, expires, token_len, fingerprint_len, result_len, at, offset
    if form == 70 then  -- 'F': CLAIMED, fence 1, no result; expires_at its key's expiry
      offset, token_len, fingerprint_len, at = match(raw, kFresh)
      if offset == nil or #offset > 15 then malformed() end
      fence, result_len = '1', '-1'
    elseif form == 69 then  -- 'E': DONE; expires_at its key's expiry
      fence, lease, token_len, fingerprint_len, result_len, at = match(raw, kDoneByKey)
    else
      fence, lease, expires, token_len, fingerprint_len, result_len, at = match(raw, kFull)
    end
    -- The fence starts with 1 to 9; every number has at most 15 characters (exact as a double).
    if fence == nil or #fence > 15 or byte(fence) == 48 or (lease ~= nil and #lease > 15) or
        (expires ~= nil and #expires > 15) then
      malformed()
    end
    token_len_text, fingerprint_len_text, result_len_text = token_len, fingerprint_len, result_len
    token_len = token_len + 0
    fingerprint_len = fingerprint_len == '-1' and -1 or fingerprint_len + 0
    result_len = result_len == '-1' and -1 or result_len + 0
    local token_end = at + token_len - 1
    local fingerprint_end = token_end + (fingerprint_len < 0 and 0 or fingerprint_len)
    local result_end = fingerprint_end + (result_len < 0 and 0 or result_len)
    if result_end ~= #raw or fingerprint_len < -1 or result_len < -1 then malformed() end
    if expires ~= nil then
      expires_at = expires + 0
    else
      expires_at = redis.pcall('PEXPIRETIME', key)
      if type(expires_at) ~= 'number' then
        -- Before Redis 7 (the client stops writing the fresh form at the first refusal).
        local pttl = redis.call('PTTL', key)
        if pttl < 0 then malformed() end
        expires_at = now + pttl
      end
      if expires_at < 0 then malformed() end
    end
    state = (form == 68 or form == 69) and 'DONE' or 'CLAIMED'  -- 'D', 'E'
    fence_text, claim_token = fence, sub(raw, at, token_end)
    if offset ~= nil then lease_number = expires_at - offset else lease_text = lease end
    if fingerprint_len >= 0 then fingerprint = sub(raw, token_end + 1, fingerprint_end) end
    if result_len >= 0 then result = sub(raw, fingerprint_end + 1, result_end) end
  end
  -- fence and lease_expiry are converted only where an operation needs their values.
  if state ~= nil then live = now < expires_at end
end

-- A caller's fence: a decimal integer of any length, kept as text (compared, never converted).
-- One equal to the stored fence is decimal already.
local caller_fence = ARGV[3]
if op ~= 'claim' and caller_fence ~= fence_text and
    (caller_fence == nil or find(caller_fence, kDecimal) == nil) then
  caller_fence = nil
end

-- Each operation answers at once, or sets `reply` and the record to write: every field of it
-- (new_fence and new_lease_expiry a number, or the stored text when unchanged; new_result /
-- new_fingerprint nil for none), and `publish`, what to tell waiters.
local reply, publish
local new_state, new_fence, new_lease_expiry, new_expires_at, new_token, new_result, new_fingerprint

if op == 'inspect' then
  if state == nil then return false end
  return {state, fence_text, lease_text or format('%d', lease_number), format('%d', expires_at),
          claim_token, result or false, fingerprint or false}

elseif op == 'claim' then
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
    fence, lease_expiry = fence_text + 0, lease_number or lease_text + 0
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
  if not live or fence_text ~= caller_fence then return 'complete:0' end
  if state == 'DONE' then return 'complete:1' end
  -- No lease guard: until someone reclaims, the lapsed holder is the only one that ran.
  new_state, new_fence, new_lease_expiry, new_expires_at = 'DONE', fence_text,
      lease_text or lease_number, now + ttl
  new_token, new_result, new_fingerprint = claim_token, result_arg, fingerprint
  reply, publish = 'complete:1', 'complete'  -- wakes wait_for_change() in other processes

elseif op == 'release' then
  local ttl = int_arg(4)
  if caller_fence == nil or ttl <= 0 then
    return redis.error_reply('ERR idempotency script: bad fence or ttl')
  end
  if not live or fence_text ~= caller_fence or state == 'DONE' then
    return 'release:0'
  end
  -- Advancing the fence kills the released claim; keeping the record keeps the fence. Nobody
  -- holds the new fence, so the token is cleared: no retried claim may re-affirm it.
  new_state, new_fence, new_lease_expiry, new_expires_at = 'CLAIMED', fence_text + 1,
      now, math.max(expires_at, now + ttl)
  new_token, new_result, new_fingerprint = '', result, fingerprint
  reply, publish = 'release:1', 'release'

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

-- The write: one SET of the record's string over whatever is there (a hash of an earlier
-- version too), never a DEL and a re-create. On a Redis Cluster node whose slot is migrating, a
-- key that stops existing mid-script makes the next write fail with "non local key" after the
-- DEL already took effect (scripts are not rolled back), which lost the record and let a
-- second claimant win (RedisCluster.ReshardingTheKeysSlotsUnderLoadLosesAndDoublesNoClaim).
-- A number that did not change is the text it was read as, as is a length while its string is
-- the one read (Lua interns strings: `==` compares them at once, and a number is never equal
-- to a string).
local f = new_fence == fence_text and fence_text or format('%d', new_fence)
local l = new_lease_expiry == lease_text and lease_text or format('%d', new_lease_expiry)
local e = format('%d', new_expires_at)
local token_len = new_token == claim_token and token_len_text or format('%d', #new_token)
local fingerprint_len = new_fingerprint == nil and '-1' or
    (new_fingerprint == fingerprint and fingerprint_len_text) or format('%d', #new_fingerprint)
local result_len = new_result == nil and '-1' or (new_result == result and result_len_text) or
    format('%d', #new_result)
redis.call('SET', key, (new_state == 'DONE' and 'D ' or 'C ') .. f .. ' ' .. l .. ' ' .. e ..
    ' ' .. token_len .. ' ' .. fingerprint_len .. ' ' .. result_len .. '\n' .. new_token ..
    (new_fingerprint or '') .. (new_result or ''))
if server_clock then
  redis.call('PEXPIREAT', key, e)
else
  -- An injected clock is not the server's, so its instants mean nothing to PEXPIREAT: keep
  -- the remaining lifetime instead, plus 10 min of slack, because Redis counts it in real
  -- time while the injected clock may crawl (a test's manual clock). The record is judged
  -- expired by the injected clock alone (see `live`); the slack only delays the reaping.
  redis.call('PEXPIRE', key, format('%d', new_expires_at - now + 600000))
end
-- pcall: the write above stands whatever PUBLISH answers (a script is never rolled back), and
-- an ACL user without channel access (Redis 7's default for a new user) would otherwise turn
-- every complete and release that landed into an error. A waiter then wakes by its back-off.
if publish then redis.pcall('PUBLISH', key, publish) end
return reply
