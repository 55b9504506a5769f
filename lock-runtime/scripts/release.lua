-- Release a lock if, and only if, the caller still owns it, and tell waiters if there are any.
--
-- KEYS[1]  the lock (see acquire.lua); its name is also the channel waiters subscribe to
-- ARGV[1]  owner token
-- ARGV[2]  milliseconds to keep the lock for hold_at_least (0: release it now)
-- ARGV[3]  "sharded" announces the release with SPUBLISH (Redis Cluster 7+, where the channel
--          lives in the lock's own slot); "quiet" does not announce it (Redlock giving back a
--          minority grant while another owner holds the majority); "" announces with PUBLISH
-- ARGV[4]  milliseconds to keep the last fencing token after the release (`free fence=<F>`,
--          fence_retention), so that the next token continues from it; 0 deletes the key
--
-- Returns  1   released (or handed to expiry for hold_at_least)
--          0   not ours: held under another token or the key holds other data; left untouched
--          -1  no lock at the key (it expired, or was released already)
--
-- Redis calls: GET, then SET (or DEL), and PUBLISH only when someone was told the lock was busy.
-- Sent with no keys only to put the script in the server's cache (by a client whose user may
-- not run SCRIPT LOAD): does nothing.
if #KEYS == 0 then
  return 0
end
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'table' then
  return 0
end
if not value then
  return -1
end
local state, fence, rest = string.match(value, '^(%l+) fence=(%d+)(.*)$')
if state == 'free' then
  return -1
end
local owner, waiting
if state == 'held' then
  owner, waiting = string.match(rest, '^ token=(%S+) waiting=(%d)')
end
if owner ~= ARGV[1] then
  return 0
end
waiting = waiting == '1'

local keep = tonumber(ARGV[2])
local retention = tonumber(ARGV[4])
-- The SETs are pcalls: a server out of memory refuses them, and a release must still work
-- then (DEL and PEXPIRE need no memory). Tokens then rest on the server's clock.
if keep > 0 then
  -- Nobody owns it any more (renewal and release stop matching), but it stays busy until it
  -- expires.
  local kept = redis.pcall('SET', KEYS[1],
    'kept fence=' .. fence .. ' waiting=' .. (waiting and '1' or '0'), 'PX', keep)
  if type(kept) == 'table' and kept.err then
    redis.call('PEXPIRE', KEYS[1], keep)
  end
else
  local freed = retention > 0 and redis.pcall('SET', KEYS[1], 'free fence=' .. fence, 'PX', retention)
  if not freed or (type(freed) == 'table' and freed.err) then
    redis.call('DEL', KEYS[1])
  end
end

-- Tells waiters to look again (after a `kept` release: to learn the shorter lease). The message
-- is an id of this release (48 bits of the SHA-1 of the owner token, which cannot be turned back
-- into it): Redlock announces one release on every master, and a process hands each release to
-- one waiter.
if waiting and ARGV[3] ~= 'quiet' then
  local release = string.sub(redis.sha1hex(ARGV[1]), 1, 12)
  if ARGV[3] == 'sharded' then
    -- pcall: a cluster older than 7.0 has no SPUBLISH; its waiters fall back to lease expiry,
    -- and the release itself must still succeed.
    redis.pcall('SPUBLISH', KEYS[1], release)
  else
    -- pcall: a user without rights on the channel (a Redis 7 ACL user lacking `&*`) must
    -- still release; its waiters fall back to lease expiry (reported once, at connect).
    redis.pcall('PUBLISH', KEYS[1], release)
  end
end
return 1
