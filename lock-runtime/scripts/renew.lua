-- Renew a lease if, and only if, the caller still owns the lock (or the semaphore's permit).
--
-- KEYS[1]  the lock (see acquire.lua), or a semaphore (see semaphore.lua)
-- ARGV[1]  owner token
-- ARGV[2]  new lease in milliseconds, counted from now
-- ARGV[3]  for a semaphore's permit only: the number of permits it was taken with
--
-- Returns  1  renewed
--          0  not renewed: the lock is gone, held under another token, or the key holds other
--             data; the permit is gone or its lease ended
--
-- Redis calls: GET, PEXPIRE; for a permit ZSCORE, TIME, ZADD, PTTL and mostly PEXPIRE.
-- One script for both, so that the watchdog's pipelines stay of one script.
-- Sent with no keys only to put the script in the server's cache (by a client whose user may
-- not run SCRIPT LOAD): does nothing.
if #KEYS == 0 then
  return 0
end
-- Its rights, before anything is written (see rights.lua): a refused command is an error, never
-- a lease found lost.
if ARGV[3] then
  may(nil, 'TIME')
  may(KEYS[1], 'ZSCORE', 'ZADD', 'PTTL', 'PEXPIRE')
  local member = ARGV[3] .. ':' .. ARGV[1]
  local score = redis.pcall('ZSCORE', KEYS[1], member)
  other_type(score)
  local time = redis.call('TIME')
  local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  -- A lease that ended is not brought back: its place may be someone else's by now.
  if type(score) ~= 'string' or tonumber(score) <= now_ms then
    return 0
  end
  local ttl = tonumber(ARGV[2])
  redis.call('ZADD', KEYS[1], now_ms + ttl, member)
  if redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 1
end
may(KEYS[1], 'GET', 'PEXPIRE')
local value = redis.pcall('GET', KEYS[1])
other_type(value)
-- A lock, or a read-write lock's writer, held by the caller (see value.lua).
local lock = type(value) == 'string' and read_lock(value)
if lock and lock.state == 'held' and lock.owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
