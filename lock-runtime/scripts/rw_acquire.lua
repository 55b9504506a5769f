-- Take a read share or the write hold of a read-write lock, or say how long until what stands
-- in the way ends.
--
-- KEYS[1]  the readers: a sorted set of `r:<owner token>` scored by the end of each share's
--          lease (server time in ms); it expires with its longest lease
-- KEYS[2]  the writer: `held fence=<n> token=<owner token> waiting=0`, a held lock's value with
--          its fencing token n (see value.lua; 0.2 and 0.3 wrote it without ` waiting=0`, and
--          read this form as theirs), expiring with its lease
-- KEYS[3]  the waiting writer's marker: while it exists, new readers wait. It expires on its
--          own (about a lease after the writer last asked), so a writer that dies while waiting
--          holds nobody up for long
-- KEYS[4]  the fencing token counter of the keys' slot (see queue.lua's next_token), which
--          hands out both modes' tokens
-- KEYS[5]  present after someone was told the lock is busy, until a lease of theirs after what
--          stood in their way ends (when that waiter looks again): while it is, releases
--          announce themselves. It expires by itself
-- KEYS[6]  `<prefix>{<key>}:rw:fence`, where 0.2 kept the last fencing token: taken over by a
--          grant while it exists (see queue.lua's take_over_fence), never written
-- ARGV[1]  owner token (a UUID v4, unique per acquisition)
-- ARGV[2]  `r` for a read share, `w` for the write hold
-- ARGV[3]  lease in milliseconds
-- ARGV[4]  "1" if the caller waited for this grant, as semaphore.lua's ARGV[4]
-- ARGV[5]  "clock": the token is also at least the server time in µs, as acquire.lua's ARGV[8]
-- ARGV[6]  "1" if the caller waits when told busy: only a writer that waits marks itself
--          waiting, so a writer that only tries holds no reader up
--
-- Returns  {1, fencing token, 0, 0}  granted (also when ARGV[1] holds it already: its lease is
--                                    refreshed, under a new fencing token)
--          {0, pttl, 0, marked}      busy; pttl: ms until what stands in the way ends; marked: 1
--                                    if the caller is a writer that marked itself waiting (it
--                                    asks again every third of its lease to keep the mark, and
--                                    takes it away with rw_leave.lua when it stops waiting)
--          {-1, 0, 0, 0}             a key holds data that is not a read-write lock: untouched
--          {-2, 0, 0, 0}             the counter (or the token 0.2 kept) holds something tokens
--                                    cannot continue from: not granted
--
-- Redis calls: TIME, ZREMRANGEBYSCORE, GET, PTTL, then for a read ZSCORE, EXISTS, ZADD; for a
-- write ZRANGE, SET, GET (and DEL of its own waiting mark); for a grant GET of KEYS[6] and INCR of the counter (TIME and SET when
-- the counter is seeded or follows the clock); for a busy answer PTTL of the busy marker, and SET
-- when it would end sooner. Nothing of a read-write lock is left once its last holder is gone
-- but the waiting markers (KEYS[3], KEYS[5]), until they expire.
if #KEYS == 0 then
  return 0
end
local READERS, WRITER, WRITER_WAITING = KEYS[1], KEYS[2], KEYS[3]
local COUNTER, WAITING, OLD_FENCE = KEYS[4], KEYS[5], KEYS[6]
local TOKEN, MODE, TTL = ARGV[1], ARGV[2], ARGV[3]
local ttl = tonumber(TTL)
local member = 'r:' .. TOKEN

-- Every path's rights, before anything is written (see rights.lua).
may(READERS, 'ZREMRANGEBYSCORE', 'ZSCORE', 'ZRANGE', 'ZADD', 'PTTL', 'PEXPIRE')
may(WRITER, 'GET', 'PTTL', 'SET')
may(WRITER_WAITING, 'SET', 'EXISTS', 'PTTL', 'GET', 'DEL')
may(WAITING, 'PTTL', 'SET')
may_take_over(COUNTER, OLD_FENCE)
local _, time = server_time()
local now_ms = millis(time)

local function busy(pttl, marked)
  -- From now on releases announce themselves: at least until the caller looks again, when what
  -- stands in the way ends (`pttl`), and a lease of the caller's after that. A lease alone is not
  -- enough: a reader with a shorter lease than the writer's remaining hold would sleep through
  -- the writer's release.
  keep_marker(WAITING, pttl + ttl)
  return {0, math.max(pttl, 1), 0, marked}
end

-- A share ends at its score.
local dropped = redis.pcall('ZREMRANGEBYSCORE', READERS, '-inf', now_ms)
if other_type(dropped) then
  return {-1, 0, 0, 0}
end
local writer = redis.pcall('GET', WRITER)
if other_type(writer) then
  return {-1, 0, 0, 0}
end
if writer then
  local holder = read_lock(writer)
  if not holder or holder.state ~= 'held' then
    return {-1, 0, 0, 0}
  end
  if holder.owner ~= TOKEN then
    if MODE == 'w' and ARGV[6] == '1' then
      redis.pcall('SET', WRITER_WAITING, TOKEN, 'PX', redis.call('PTTL', WRITER) + ttl)
      return busy(redis.call('PTTL', WRITER), 1)
    end
    return busy(redis.call('PTTL', WRITER), 0)
  end
end

if MODE == 'r' then
  if not redis.call('ZSCORE', READERS, member) and redis.call('EXISTS', WRITER_WAITING) == 1 then
    -- A writer waits: new readers queue behind it.
    return busy(redis.call('PTTL', WRITER_WAITING), 0)
  end
else
  local first = redis.call('ZRANGE', READERS, 0, 0, 'WITHSCORES')
  if first[1] then
    local pttl = tonumber(first[2]) - now_ms
    if ARGV[6] == '1' then
      -- Refreshed by each of the writer's tries, and kept until the first share it waits for
      -- could end, and a lease more.
      redis.pcall('SET', WRITER_WAITING, TOKEN, 'PX', pttl + ttl)
      return busy(pttl, 1)
    end
    return busy(pttl, 0)
  end
end

if not take_over_fence(COUNTER, OLD_FENCE) then
  return {-2, 0, 0, 0}
end
local fence = next_token(COUNTER, ARGV[5] == 'clock')
if not fence then
  return {-2, 0, 0, 0}
end
if MODE == 'r' then
  redis.call('ZADD', READERS, now_ms + ttl, member)
  if redis.call('PTTL', READERS) < ttl then
    redis.call('PEXPIRE', READERS, TTL)
  end
else
  -- A held lock's value with the writer's fencing token (see value.lua), which 0.2 and 0.3 read
  -- as their own writers' form.
  redis.call('SET', WRITER, held_value(TOKEN, '0', '', fence), 'PX', TTL)
  -- Its turn came: readers may queue behind the next waiting writer only.
  if redis.call('GET', WRITER_WAITING) == TOKEN then
    redis.call('DEL', WRITER_WAITING)
  end
end
if ARGV[4] == '1' then
  keep_marker(WAITING, ttl)
end
return {1, fence, 0, 0}
