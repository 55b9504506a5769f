-- Give a semaphore's permit back if, and only if, the caller still holds it, and tell waiters if
-- there are any.
--
-- KEYS[1]  the semaphore (see semaphore.lua); its name is also the channel waiters subscribe to
-- KEYS[2]  its waiting marker (see semaphore.lua)
-- ARGV[1]  owner token
-- ARGV[2]  the number of permits it was taken with
-- ARGV[3]  milliseconds to keep the permit for hold_at_least (0: give it back now)
-- ARGV[4]  how to announce the release, as release.lua's ARGV[3]
--
-- Returns  1   released (or left to expire then, for hold_at_least)
--          -1  not held: its lease ran out, or someone removed it
--          0   the key holds data that is not a semaphore: left untouched
--
-- Redis calls: ZSCORE, TIME, ZREM (or ZADD and PTTL), EXISTS, and PUBLISH while someone waits.
if #KEYS == 0 then
  return 0
end
local member = ARGV[2] .. ':' .. ARGV[1]
-- Its rights, before anything is written (see rights.lua).
may(nil, 'TIME')
may(KEYS[1], 'ZSCORE', 'ZREM', 'ZADD', 'PTTL', 'PEXPIRE')
may(KEYS[2], 'EXISTS')
local score = redis.pcall('ZSCORE', KEYS[1], member)
if other_type(score) then
  return 0
end
if not score then
  return -1
end
local _, time = server_time()
local now_ms = millis(time)
if tonumber(score) <= now_ms then
  -- Its lease ended: no longer ours, whether or not anyone took the place yet.
  redis.call('ZREM', KEYS[1], member)
  return -1
end
if ARGV[3] ~= '0' then
  -- Nobody renews it any more; it ends by itself then.
  local keep = tonumber(ARGV[3])
  redis.call('ZADD', KEYS[1], now_ms + keep, member)
  if redis.call('PTTL', KEYS[1]) < keep then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
else
  redis.call('ZREM', KEYS[1], member)
end
-- The message is the release's id, as release.lua's: one waiter per process takes it.
if redis.call('EXISTS', KEYS[2]) == 1 then
  announce(KEYS[1], token_id(ARGV[1]), ARGV[4])
end
return 1
