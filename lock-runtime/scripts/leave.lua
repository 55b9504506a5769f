-- A fair waiter leaves the line (it gave up, or its call was dropped). If the lock was freed for
-- it, it is freed for the next in line instead, who is told; or, if nobody is left, for anyone,
-- and announced as a release is.
--
-- KEYS[1]  the lock (see acquire.lua)
-- KEYS[2]  the line of fair waiters, and KEYS[3] when their entries end (see queue.lua)
-- ARGV[1]  the waiter's owner token
-- ARGV[2]  how long a lock freed for the first in line waits for it, as release.lua's ARGV[5]
-- ARGV[3]  how the next in line is told, as release.lua's ARGV[3]
--
-- Returns  1
--
-- Redis calls: ZREM, ZREM, GET; if the lock was freed for the waiter, TIME and what finding the
-- next in line costs (see queue.lua), SET or DEL, and PUBLISH (SPUBLISH on a cluster).
-- Sent with no keys only to put the script in the server's cache (by a client whose user may
-- not run SCRIPT LOAD): does nothing.
if #KEYS == 0 then
  return 0
end
-- Every path's rights, before anything is written (see rights.lua).
may_serve(KEYS[2], KEYS[3])
may(KEYS[1], 'GET', 'SET', 'DEL')
leave_line(KEYS[2], KEYS[3], ARGV[1])
local value = redis.pcall('GET', KEYS[1])
if other_type(value) or not value then
  return 1
end
local lock = read_lock(value)
if not lock or lock.next ~= ARGV[1] then
  return 1
end
if not free_for_next(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[2]), ARGV[3]) then
  -- Nobody else in line: freed for anyone, which is told as a release is (the id of the waiter
  -- that left stands for the release's). Waiters without `fair` told the lock was busy would
  -- otherwise look again only when the turn would have ended.
  announce(KEYS[1], token_id(ARGV[1]), ARGV[3])
end
return 1
