-- Take one permit of a semaphore, or say how long until the first holder's lease ends.
--
-- KEYS[1]  the semaphore: a sorted set of its holders, each `<permits>:<owner token>` scored by
--          the end of its lease (server time in ms). It expires with its longest lease, so the
--          declared number of permits lives exactly as long as someone holds one
-- KEYS[2]  the fencing token counter of the semaphore's slot (see queue.lua's next_token)
-- KEYS[3]  `<semaphore>:waiting`, present after someone was told every permit is taken, until
--          a lease after the first holder's lease ends (when that waiter looks again): while it
--          is, releases announce themselves. It expires by itself
-- KEYS[4]  `<semaphore>:fence`, where 0.2 kept the last fencing token: taken over by a grant
--          while it exists (see queue.lua's take_over_fence), never written
-- ARGV[1]  owner token (a UUID v4, unique per acquisition)
-- ARGV[2]  the number of permits the caller declares (decimal, at least 1)
-- ARGV[3]  lease in milliseconds
-- ARGV[4]  "1" if the caller waited for this permit: others of its process may still wait, so
--          releases must keep announcing themselves; "0" otherwise
-- ARGV[5]  "clock": the token is also at least the server time in µs, as acquire.lua's ARGV[8]
--
-- Returns  {1, fencing token, 0, 0}  granted (also when ARGV[1] holds a permit already: its
--                                    lease is refreshed, under a new fencing token)
--          {0, pttl, 0, 0}           every permit is held; pttl: ms until the first lease ends
--          {-1, 0, 0, 0}             a key holds data that is not a semaphore: left untouched
--          {-2, 0, 0, 0}             the counter (or the token 0.2 kept) holds something tokens
--                                    cannot continue from: not granted
--          {-3, permits, 0, 0}       held under another number of permits (returned): nothing
--                                    written. Once no holder is left, the next caller's number
--                                    applies.
--
-- Redis calls: TIME, ZREMRANGEBYSCORE, ZRANGE, then for a grant GET (of KEYS[4]), INCR, ZADD,
-- PTTL (and PEXPIRE when the set would expire before the new lease; TIME and SET when the
-- counter is seeded or follows the clock); a busy answer ZCARD, ZSCORE, PTTL, and SET when the
-- waiting marker would end sooner. Nothing of a semaphore is left once its last holder is gone
-- but the waiting marker, until it expires.
if #KEYS == 0 then
  return 0
end
local SET, COUNTER, WAITING, OLD_FENCE = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local TOKEN, PERMITS, TTL = ARGV[1], ARGV[2], ARGV[3]
local member = PERMITS .. ':' .. TOKEN

-- Every path's rights, before anything is written (see rights.lua).
may(SET, 'ZREMRANGEBYSCORE', 'ZRANGE', 'ZCARD', 'ZSCORE', 'ZADD', 'PTTL', 'PEXPIRE')
may(WAITING, 'PTTL', 'SET')
may_take_over(COUNTER, OLD_FENCE)
local _, time = server_time()
local now_ms = millis(time)
-- A lease ends at its score: from then on, its permit is anyone's.
local dropped = redis.pcall('ZREMRANGEBYSCORE', SET, '-inf', now_ms)
if other_type(dropped) then
  return {-1, 0, 0, 0}
end
local first = redis.call('ZRANGE', SET, 0, 0, 'WITHSCORES')
if first[1] then
  local declared = string.match(first[1], '^(%d+):')
  if not declared then
    return {-1, 0, 0, 0}
  end
  if declared ~= PERMITS then
    return {-3, tonumber(declared), 0, 0}
  end
  if redis.call('ZCARD', SET) >= tonumber(PERMITS) and not redis.call('ZSCORE', SET, member) then
    -- From now on releases announce themselves: at least until the caller looks again, when
    -- the first lease ends, and a lease of the caller's after that.
    local pttl = tonumber(first[2]) - now_ms
    keep_marker(WAITING, pttl + tonumber(TTL))
    return {0, pttl, 0, 0}
  end
end

if not take_over_fence(COUNTER, OLD_FENCE) then
  return {-2, 0, 0, 0}
end
local fence = next_token(COUNTER, ARGV[5] == 'clock')
if not fence then
  return {-2, 0, 0, 0}
end
local ttl = tonumber(TTL)
redis.call('ZADD', SET, now_ms + ttl, member)
if redis.call('PTTL', SET) < ttl then
  redis.call('PEXPIRE', SET, TTL)
end
if ARGV[4] == '1' then
  keep_marker(WAITING, ttl)
end
return {1, fence, 0, 0}
