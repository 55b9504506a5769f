-- Force-release a lock whatever its owner token: what an operator does to a lock whose holder
-- hangs (`lockctl unlock`). The holder's next renewal or release finds the token gone and
-- reports the lease lost.
--
-- KEYS[1]  the lock (see acquire.lua); its name is also the channel waiters subscribe to
-- KEYS[2]  the line of fair waiters, and KEYS[3] when their entries end (see queue.lua)
-- ARGV[1]  milliseconds to keep the last fencing token (`free fence=<F>`); 0 deletes the key
-- ARGV[2]  how the release is announced, as release.lua's ARGV[3] ("sharded" on Redis Cluster)
-- ARGV[3]  how long (ms) a lock freed for the first in line of fair waiters waits for it
-- ARGV[4]  the fencing token of the holder to remove, "" for whoever holds it: an operator who
--          confirmed the removal of one holder never removes the next one by mistake
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
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'table' then
  return {0, ''}
end
if not value then
  return {-1, ''}
end
local state, fence, rest = string.match(value, '^(%l+) fence=(%d+)(.*)$')
if state == 'free' then
  return {-1, value}
end
if state ~= 'held' and state ~= 'kept' then
  return {0, ''}
end
if ARGV[4] ~= '' and fence ~= ARGV[4] then
  return {-2, value}
end

if free_for_next(KEYS[1], KEYS[2], KEYS[3], fence, tonumber(ARGV[3]), ARGV[1], ARGV[2]) then
  return {2, value}
end
-- The same id a release by the holder would announce (a hash of its owner token, which cannot
-- be turned back into it); a kept lock has no token any more, so its fence stands in.
local owner = string.match(rest, '^ token=(%S+)') or ('kept ' .. fence)
announce(KEYS[1], string.sub(redis.sha1hex(owner), 1, 12), ARGV[2])
return {1, value}
