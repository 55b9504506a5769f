-- Hand a lock from its holder straight to a waiter of the same process, in one step: what a
-- release followed by that waiter's acquire would do, without the lock ever being free. Only
-- when nobody else was told the lock is busy (`waiting=0`): otherwise it is released as
-- release.lua does, announced, and everyone competes.
--
-- KEYS[1]  the lock (see acquire.lua)
-- ARGV[1]  the holder's owner token
-- ARGV[2]  the waiter's owner token
-- ARGV[3]  the waiter's lease in milliseconds
-- ARGV[4]  who holds it, as acquire.lua's ARGV[3]
-- ARGV[5]  how a release announces itself, as release.lua's ARGV[3]
-- ARGV[6]  how long a release keeps the last fencing token, as release.lua's ARGV[4]
--
-- Returns  {1, fencing token}  handed over: the waiter holds it now
--          {2, 0}              released instead (someone else waits), as release.lua's 1
--          {0, 0}              not the holder's: left untouched
--          {-1, 0}             no lock at the key (it expired, or was released already)
--
-- Redis calls: GET, TIME, SET (a release instead: GET, SET, PUBLISH).
-- Sent with no keys only to put the script in the server's cache (by a client whose user may
-- not run SCRIPT LOAD): does nothing.
if #KEYS == 0 then
  return 0
end
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'table' then
  return {0, 0}
end
if not value then
  return {-1, 0}
end
local state, fence, rest = string.match(value, '^(%l+) fence=(%d+)(.*)$')
if state == 'free' then
  return {-1, 0}
end
local owner, waiting
if state == 'held' then
  owner, waiting = string.match(rest, '^ token=(%S+) waiting=(%d)')
end
if owner ~= ARGV[1] then
  return {0, 0}
end

if waiting == '1' then
  -- Someone elsewhere waits: give them their chance, as a release does.
  local retention = tonumber(ARGV[6])
  local freed = retention > 0 and redis.pcall('SET', KEYS[1], 'free fence=' .. fence, 'PX', retention)
  if not freed or (type(freed) == 'table' and freed.err) then
    redis.call('DEL', KEYS[1])
  end
  local release = string.sub(redis.sha1hex(ARGV[1]), 1, 12)
  if ARGV[5] == 'sharded' then
    redis.pcall('SPUBLISH', KEYS[1], release)
  else
    redis.pcall('PUBLISH', KEYS[1], release)
  end
  return {2, 0}
end

-- As in acquire.lua, the token is built as text.
local time = redis.call('TIME')
local now = time[1] .. string.sub('00000' .. time[2], -6)
local next_fence = now
if tonumber(now) <= tonumber(fence) then
  next_fence = string.format('%.0f', tonumber(fence) + 1)
end
local holder = ''
if ARGV[4] ~= '' then
  holder = ' since=' .. string.sub(now, 1, -4) .. ARGV[4]
end
redis.call('SET', KEYS[1],
  'held fence=' .. next_fence .. ' token=' .. ARGV[2] .. ' waiting=0' .. holder,
  'PX', ARGV[3])
return {1, next_fence}
