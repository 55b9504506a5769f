-- Release a lock if, and only if, the caller still owns it, and tell waiters.
--
-- KEYS[1]  the lock (see acquire.lua); its name is also the channel waiters subscribe to
-- ARGV[1]  owner token
-- ARGV[2]  milliseconds to keep the lock for hold_at_least (0: delete it now)
-- ARGV[3]  optional: "sharded" announces the release with SPUBLISH (Redis Cluster 7+, where the
--          channel lives in the lock's own slot); "quiet" does not announce it (Redlock giving
--          back a minority grant while another owner holds the majority); absent: PUBLISH
--
-- Returns  1   released (deleted and published, or handed to expiry for hold_at_least)
--          0   not ours: held under another token or the key holds other data; left untouched
--          -1  no lock at the key (it expired)
-- Sent with no keys only to put the script in the server's cache (by a client whose user may
-- not run SCRIPT LOAD): does nothing.
if #KEYS == 0 then
  return 0
end
local owner = redis.pcall('HGET', KEYS[1], 'token')
if owner ~= ARGV[1] then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return 0
  end
  return -1
end
-- Tells waiters to look again. The message is an id of this release (48 bits of the SHA-1 of
-- the owner token, which cannot be turned back into it): Redlock announces one release on every
-- master, and a process hands each release to one waiter.
local function announce()
  if ARGV[3] == 'quiet' then
    return
  end
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

local keep = tonumber(ARGV[2])
if keep > 0 then
  -- Nobody owns it any more (renewal and release stop matching), but it stays busy until it expires.
  redis.call('HSET', KEYS[1], 'token', '')
  redis.call('PEXPIRE', KEYS[1], keep)
  -- Waiters look again and learn the shorter remaining lease.
  announce()
  return 1
end
redis.call('DEL', KEYS[1])
announce()
return 1
