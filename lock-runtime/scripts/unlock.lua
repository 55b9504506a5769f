-- Force-release a lock whatever its owner token: what an operator does to a lock whose holder
-- hangs (`lockctl unlock`). The holder's next renewal or release finds the token gone and
-- reports the lease lost.
--
-- KEYS[1]  the lock (see acquire.lua); its name is also the channel waiters subscribe to
-- KEYS[2]  the line of fair waiters, and KEYS[3] when their entries end (see queue.lua)
-- ARGV[1]  unused (0.2 kept the last fencing token for this long; tokens now come from a counter)
-- ARGV[2]  how the release is announced, as release.lua's ARGV[3] ("sharded" on Redis Cluster)
-- ARGV[3]  how long (ms) a lock freed for the first in line of fair waiters waits for it
-- ARGV[4]  the holder to remove: the id of its owner token (12 hex digits of its SHA-1, as
--          `lockctl show` prints it) or, for a lock 0.2 wrote, its fencing token; "" for whoever
--          holds it: an operator who confirmed the removal of one holder never removes the
--          next one by mistake
--
-- Returns  {1, value}  released and announced; value is what the lock held before
--          {2, value}  released for the first in line of fair waiters, who was told
--          {-1, value} not held: absent (value "") or already free (value: the free marker)
--          {-2, value} held by another holder than ARGV[4] names: left untouched
--          {0, ""}     the key holds data that is not a lock: left untouched
--
-- Redis calls: GET, TIME, what finding the first in line costs (see queue.lua), SET (or DEL),
-- and PUBLISH or SPUBLISH.
-- Sent with no keys only to put the script in the server's cache: does nothing.
if #KEYS == 0 then
  return 0
end
-- Every path's rights, before anything is written (see rights.lua).
may(KEYS[1], 'GET', 'SET', 'DEL')
may_serve(KEYS[2], KEYS[3])
local value = redis.pcall('GET', KEYS[1])
if other_type(value) then
  return {0, ''}
end
if not value then
  return {-1, ''}
end
local lock = read_lock(value)
if not lock then
  return {0, ''}
end
if lock.state == 'free' then
  return {-1, value}
end
-- The same id a release by the holder would announce (a hash of its owner token, which cannot
-- be turned back into it); a kept lock has no token any more: its value stands in.
local id = token_id(lock.owner or value)
if ARGV[4] ~= '' and ARGV[4] ~= id and ARGV[4] ~= lock.fence then
  return {-2, value}
end

if free_for_next(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[3]), ARGV[2]) then
  return {2, value}
end
announce(KEYS[1], id, ARGV[2])
return {1, value}
