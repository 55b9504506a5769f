-- Renew a lease if, and only if, the caller still owns the lock.
--
-- KEYS[1]  the lock (see acquire.lua)
-- ARGV[1]  owner token
-- ARGV[2]  new lease in milliseconds, counted from now
--
-- Returns  1  renewed
--          0  not renewed: the lock is gone, held under another token, or the key holds other data
local owner = redis.pcall('HGET', KEYS[1], 'token')
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
