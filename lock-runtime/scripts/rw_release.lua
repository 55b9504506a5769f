-- Give a read share or the write hold of a read-write lock back if, and only if, the caller
-- still holds it, and tell waiters if there are any.
--
-- KEYS[1]  the readers (see rw_acquire.lua)
-- KEYS[2]  the writer (see rw_acquire.lua)
-- KEYS[3]  the busy marker (rw_acquire.lua's KEYS[5])
-- ARGV[1]  owner token
-- ARGV[2]  `r` for a read share, `w` for the write hold
-- ARGV[3]  milliseconds to keep it for hold_at_least (0: give it back now)
-- ARGV[4]  how to announce the release, as release.lua's ARGV[3]
-- ARGV[5]  the channel releases are announced on (`<prefix>{<key>}:rw`, in the keys' slot)
--
-- Returns  1   released (or left to expire then, for hold_at_least)
--          -1  not held: its lease ran out, or someone removed it
--          0   a key holds data that is not a read-write lock: left untouched
--
-- Redis calls: TIME, then ZSCORE and ZREM (or ZADD and PTTL) for a read; GET and DEL (or
-- PEXPIRE) for a write; EXISTS, and PUBLISH while someone waits.
if #KEYS == 0 then
  return 0
end
-- The rights of its path, before anything is written (see rights.lua).
may(nil, 'TIME')
if ARGV[2] == 'r' then
  may(KEYS[1], 'ZSCORE', 'ZREM', 'ZADD', 'PTTL', 'PEXPIRE')
else
  may(KEYS[2], 'GET', 'PEXPIRE', 'DEL')
end
may(KEYS[3], 'EXISTS')
local _, time = server_time()
local now_ms = millis(time)
local keep = tonumber(ARGV[3])
if ARGV[2] == 'r' then
  local member = 'r:' .. ARGV[1]
  local score = redis.pcall('ZSCORE', KEYS[1], member)
  if other_type(score) then
    return 0
  end
  if not score then
    return -1
  end
  if tonumber(score) <= now_ms then
    redis.call('ZREM', KEYS[1], member)
    return -1
  end
  if keep > 0 then
    -- Nobody renews it any more; it ends by itself then.
    redis.call('ZADD', KEYS[1], now_ms + keep, member)
    if redis.call('PTTL', KEYS[1]) < keep then
      redis.call('PEXPIRE', KEYS[1], ARGV[3])
    end
  else
    redis.call('ZREM', KEYS[1], member)
  end
else
  local value = redis.pcall('GET', KEYS[2])
  if other_type(value) then
    return 0
  end
  local writer = value and read_lock(value)
  if not writer or writer.state ~= 'held' or writer.owner ~= ARGV[1] then
    return -1
  end
  if keep > 0 then
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
  else
    redis.call('DEL', KEYS[2])
  end
end
-- The message is the release's id, as release.lua's: one waiter per process takes it.
if redis.call('EXISTS', KEYS[3]) == 1 then
  announce(ARGV[5], token_id(ARGV[1]), ARGV[4])
end
return 1
