-- Renew a lease if, and only if, the caller still owns the lock.
--
-- KEYS[1]  the lock (see acquire.lua)
-- ARGV[1]  owner token
-- ARGV[2]  new lease in milliseconds, counted from now
--
-- Returns  1  renewed
--          0  not renewed: the lock is gone, held under another token, or the key holds other data
--
-- Redis calls: GET, PEXPIRE.
-- Sent with no keys only to put the script in the server's cache (by a client whose user may
-- not run SCRIPT LOAD): does nothing.
if #KEYS == 0 then
  return 0
end
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'string' and string.match(value, '^held fence=%d+ token=(%S+)') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
