-- Release a lock if, and only if, the caller still owns it, and tell waiters if there are any.
--
-- KEYS[1]  the lock (see acquire.lua); its name is also the channel waiters subscribe to
-- KEYS[2]  the line of fair waiters, and KEYS[3] when their entries end (see queue.lua)
-- ARGV[1]  owner token
-- ARGV[2]  milliseconds to keep the lock for hold_at_least (0: release it now)
-- ARGV[3]  "sharded" announces the release with SPUBLISH (Redis Cluster 7+, where the channel
--          lives in the lock's own slot); "quiet" does not announce it (Redlock giving back a
--          minority grant while another owner holds the majority); "" announces with PUBLISH
-- ARGV[4]  how long (ms) a lock freed for the first in line of fair waiters waits for it
--
-- Returns  1   released (or handed to expiry for hold_at_least)
--          2   released for the first in line of fair waiters, who was told
--          0   not ours: held under another token or the key holds other data; left untouched
--          -1  no lock at the key (it expired, or was released already)
--
-- Redis calls: GET, then DEL (or SET), and PUBLISH only when someone was told the lock was busy
-- (with fair waiters in line: TIME, and finding the first of them, see queue.lua). A lock nobody
-- waited for is usually released without this script, by comparing its whole value (see
-- protocol/lean.rs); this is the path of an awaited, kept or lost one.
-- Sent with no keys only to put the script in the server's cache (by a client whose user may
-- not run SCRIPT LOAD): does nothing.
if #KEYS == 0 then
  return 0
end
-- The rights of the path it takes, before anything is written (see rights.lua).
may(KEYS[1], 'GET', 'SET', 'PEXPIRE', 'DEL')
local held, lock = held_by(KEYS[1], ARGV[1])
if held == 'gone' then
  return -1
elseif held ~= 'ours' then
  return 0
end
local waiting = lock.waiting
if ARGV[2] == '0' and waiting == '2' then
  may_serve(KEYS[2], KEYS[3])
end
-- The SET is a pcall: a server out of memory refuses it, and a release must still work then
-- (DEL and PEXPIRE need no memory).
if ARGV[2] ~= '0' then
  -- Nobody owns it any more (renewal and release stop matching), but it stays busy until it
  -- expires (and then the first in line has it, see acquire.lua).
  local kept = redis.pcall('SET', KEYS[1], kept_value(waiting), 'PX', ARGV[2])
  if type(kept) == 'table' and kept.err then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
elseif waiting == '2' then
  if free_for_next(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[4]), ARGV[3]) then
    return 2
  end
else
  redis.call('DEL', KEYS[1])
end

-- Tells waiters to look again (after a `kept` release: to learn the shorter lease). The message
-- is an id of this release (48 bits of the SHA-1 of the owner token, which cannot be turned back
-- into it): Redlock announces one release on every master, and a process hands each release to
-- one waiter.
if waiting ~= '0' then
  announce(KEYS[1], token_id(ARGV[1]), ARGV[3])
end
return 1
