-- Take one permit of a semaphore, or say how long until the first holder's lease ends.
--
-- KEYS[1]  the semaphore: a sorted set of its holders, each `<permits>:<owner token>` scored by
--          the end of its lease (server time in ms). It expires with its longest lease, so the
--          declared number of permits lives exactly as long as someone holds one
-- KEYS[2]  `<semaphore>:fence`, the last fencing token handed out (the server time in µs, or
--          one more than the last), kept for the fence retention after each grant
-- KEYS[3]  `<semaphore>:waiting`, present after someone was told every permit is taken, until
--          a lease after the first holder's lease ends (when that waiter looks again): while it
--          is, releases announce themselves
-- ARGV[1]  owner token (a UUID v4, unique per acquisition)
-- ARGV[2]  the number of permits the caller declares (decimal, at least 1)
-- ARGV[3]  lease in milliseconds
-- ARGV[4]  "1" if the caller waited for this permit: others of its process may still wait, so
--          releases must keep announcing themselves; "0" otherwise
-- ARGV[5]  how long (ms) the last fencing token is kept, as release.lua's ARGV[4]
--
-- Returns  {1, fencing token, 0, 0}  granted (also when ARGV[1] holds a permit already: its
--                                    lease is refreshed, under a new fencing token)
--          {0, pttl, 0, 0}           every permit is held; pttl: ms until the first lease ends
--          {-1, 0, 0, 0}             a key holds data that is not a semaphore: left untouched
--          {-2, 0, 0, 0}             the last fencing token is one tokens cannot continue from
--          {-3, permits, 0, 0}       held under another number of permits (returned): nothing
--                                    written. Once no holder is left, the next caller's number
--                                    applies.
--
-- Redis calls: TIME, ZREMRANGEBYSCORE, ZRANGE, then for a grant GET, SET, ZADD, PTTL (and
-- PEXPIRE when the set would expire before the new lease); a busy answer ZCARD, ZSCORE, PTTL,
-- and SET when the waiting marker would end sooner.
if #KEYS == 0 then
  return 0
end
local SET, FENCE, WAITING = KEYS[1], KEYS[2], KEYS[3]
local TOKEN, PERMITS, TTL = ARGV[1], ARGV[2], ARGV[3]
local member = PERMITS .. ':' .. TOKEN

local now_us, time = server_time()
local now_ms = millis(time)
-- A lease ends at its score: from then on, its permit is anyone's.
local dropped = redis.pcall('ZREMRANGEBYSCORE', SET, '-inf', now_ms)
if type(dropped) == 'table' then
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

local fence, refused = next_fence(FENCE, now_us)
if not fence then
  return {refused, 0, 0, 0}
end
local ttl = tonumber(TTL)
redis.call('SET', FENCE, fence, 'PX', math.max(tonumber(ARGV[5]), ttl))
redis.call('ZADD', SET, now_ms + ttl, member)
if redis.call('PTTL', SET) < ttl then
  redis.call('PEXPIRE', SET, TTL)
end
if ARGV[4] == '1' then
  keep_marker(WAITING, ttl)
end
return {1, fence, 0, 0}
