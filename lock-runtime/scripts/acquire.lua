-- Acquire a lock, or say how long its current holder still has it.
--
-- KEYS[1]  the lock: a hash {token, fence, host, pid, app, acquired_at_ms} that exists only while
--          the lock is held (or kept by hold_at_least, then with token = "")
-- KEYS[2]  the fence counter of KEYS[1]: the last fencing token handed out, kept ARGV[6] ms after the
--          last acquisition so that per-key state does not pile up forever
-- ARGV[1]  owner token (a UUID v4, unique per acquisition)
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  holder host, ARGV[4] holder pid, ARGV[5] application name ("" when unset)
-- ARGV[6]  how long the fence counter outlives the last acquisition, in milliseconds
--
-- Returns  {1, fencing token, 0}  acquired (also when ARGV[1] already holds it: the lease is
--                                 refreshed)
--          {0, pttl, holder}      held by another owner; pttl is the remaining lease in ms (-1: no
--                                 expiry); holder is 48 bits of the SHA-1 of the owner's token, the
--                                 same on every server for one owner and useless for taking the
--                                 lock over, so that Redlock can tell one owner's majority from
--                                 masters split between contenders
--          {-1, 0, 0}             the key holds data that is not a lock: left untouched
--          {-2, 0, 0}             the fence counter holds something tokens cannot continue from
--                                 (not a number, or 2^53 and above): left untouched
--
-- The fencing token is max(last + 1, server time in microseconds): strictly increasing while the
-- counter exists, and rising with the server clock after it expired.
-- Sent with no keys only to put the script in the server's cache (by a client whose user may
-- not run SCRIPT LOAD): does nothing.
if #KEYS == 0 then
  return 0
end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'hash' then
  local owner = redis.call('HGET', KEYS[1], 'token')
  if not owner then
    return {-1, 0, 0}
  end
  if owner == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(redis.call('HGET', KEYS[1], 'fence')), 0}
  end
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 then
    -- A lock always has an expiry: a hash without one that has a `token` field is someone
    -- else's data, not a lock held forever.
    return {-1, 0, 0}
  end
  return {0, pttl, tonumber(string.sub(redis.sha1hex(owner), 1, 12), 16)}
elseif kind ~= 'none' then
  return {-1, 0, 0}
end

-- Redis 5+ replicates a script by its effects, so reading TIME before writing is allowed.
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local last = 0
local stored = redis.call('GET', KEYS[2])
if stored then
  last = tonumber(stored)
  -- Not a number, or too large for a Lua number to count on exactly (2^53): handing out a
  -- token from it could make tokens go down. Leave it, and the lock, untouched.
  -- (`last ~= last` is NaN, which tonumber accepts and every comparison lets through.)
  if not last or last ~= last or last < 0 or last >= 9007199254740991 then
    return {-2, 0, 0}
  end
end
local fence = math.max(last + 1, now_us)
-- %.0f keeps all digits; tostring would print 1.7e+15.
local fence_text = string.format('%.0f', fence)
redis.call('HSET', KEYS[1],
  'token', ARGV[1],
  'fence', fence_text,
  'host', ARGV[3],
  'pid', ARGV[4],
  'app', ARGV[5],
  'acquired_at_ms', string.format('%.0f', math.floor(now_us / 1000)))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], fence_text, 'PX', ARGV[6])
return {1, fence, 0}
