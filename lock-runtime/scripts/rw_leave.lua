-- A writer that stops waiting for a read-write lock (it gave up, failed or was cancelled) takes
-- its waiting mark away, so that readers need not wait for the mark to expire, and tells them.
--
-- KEYS[1]  the waiting writer's marker (see rw_acquire.lua's KEYS[3])
-- KEYS[2]  the busy marker (rw_acquire.lua's KEYS[5])
-- ARGV[1]  owner token of the writer that stops waiting
-- ARGV[2]  how to announce it, as release.lua's ARGV[3]
-- ARGV[3]  the channel releases are announced on (`<prefix>{<key>}:rw`, in the keys' slot)
--
-- Returns  1  the mark was this writer's and is gone
--          0  another writer's mark, or none: left as it is
--
-- Redis calls: GET, then DEL, EXISTS and PUBLISH while someone waits.
if #KEYS == 0 then
  return 0
end
-- Its rights, before anything is written (see rights.lua).
may(KEYS[1], 'GET', 'DEL')
may(KEYS[2], 'EXISTS')
local mark = redis.pcall('GET', KEYS[1])
if other_type(mark) or mark ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  -- Not a release's id: every process's readers look again.
  announce(ARGV[3], 'w:' .. token_id(ARGV[1]), ARGV[2])
end
return 1
