-- Take a plain lock whoever holds it (LockManager::steal), with a new fencing token, and tell
-- the holder it was taken from, in one step.
--
-- KEYS[1]  the lock (see acquire.lua); its name is the key a notice names
-- KEYS[2]  the fencing token counter of the lock's slot (see queue.lua's next_token)
-- KEYS[3]  the line of fair waiters (see queue.lua): only counted, never changed, so that the
--          waiters keep their places and the stealer's release frees the lock for the first
-- ARGV[1]  the stealer's owner token (a UUID v4, unique per acquisition)
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  who holds it, as acquire.lua's ARGV[3]
-- ARGV[4]  the channel notices travel on (`<prefix>notices`)
-- ARGV[5]  who steals it and why: the text of the notice, already cut to its longest
--
-- A held lock is taken from its owner, whose `waiting` flag the new value keeps (waiters told
-- it is busy, or a line, go on being served by the stealer's release); a lock kept busy by
-- hold_at_least, or freed for the first in line, has no owner to tell and is taken too (the
-- first in line keeps its place and is served at the stealer's release). The value is the one
-- acquire.lua writes for a grant, and the token comes from the same counter, so it is above
-- every token handed out for this lock before. The previous owner is told on ARGV[4] with
-- PUBLISH, in the form Notice::encode writes:
--   n1 stolen <its holder id in hex> <length of the lock's name> <the lock's name><ARGV[5]>
-- (PUBLISH, not SPUBLISH: on Cluster the channel is not in the lock's slot, and PUBLISH
-- reaches every node.)
--
-- Returns  {1, fencing token, victim}   taken; victim is the 48-bit holder id of the owner it
--                                       was taken from (0: nobody held it)
--          {-1, 0, 0}                   the key holds data that is not a lock (or a lock of a
--                                       version before 0.2, a hash): left untouched
--          {-2, 0, 0}                   the counter (or a 0.2 value's token) holds something
--                                       tokens cannot continue from: left untouched
--
-- Redis calls: GET, ZCARD, INCR, SET, and PUBLISH when someone held it (plus TIME SET when the
-- counter is seeded, GET SET when a 0.2 value raises it).
-- Sent with no keys only to put the script in the server's cache: does nothing.
if #KEYS == 0 then
  return 0
end
local LOCK, COUNTER, QUEUE = KEYS[1], KEYS[2], KEYS[3]
local TOKEN = ARGV[1]

-- Every path's rights, before anything is written (see rights.lua).
may(LOCK, 'GET', 'SET')
may_count(COUNTER)
local value = redis.pcall('GET', LOCK)
if other_type(value) then
  return {-1, 0, 0}
end
local owner, waiting = nil, '0'
if value then
  local lock = read_lock(value)
  if not lock then
    return {-1, 0, 0}
  end
  if lock.fence then
    may(COUNTER, 'GET')
    if not raise_counter(COUNTER, lock.fence) then
      return {-2, 0, 0}
    end
  end
  if lock.state == 'held' and lock.owner ~= TOKEN then
    owner = lock.owner
  end
  if lock.waiting then
    waiting = lock.waiting
  end
end
if waiting ~= '2' then
  -- A line that outlived its lock (it expired, or was freed for the first in line): the
  -- stealer's release serves it. (pcall: a user without rights on sorted sets has no line.)
  local waiters = redis.pcall('ZCARD', QUEUE)
  if type(waiters) == 'number' and waiters > 0 then
    waiting = '2'
  end
end
local fence = next_token(COUNTER, false)
if not fence then
  return {-2, 0, 0}
end
redis.call('SET', LOCK, held_value(TOKEN, waiting, ARGV[3]), 'PX', ARGV[2])
if not owner then
  return {1, fence, 0}
end
-- Notice::encode writes the id in hex without leading zeros.
local id = string.match(token_id(owner), '^0*(%x+)$')
-- pcall: a user refused PUBLISH still stole the lock; its holder learns it at its renewal.
redis.pcall('PUBLISH', ARGV[4], 'n1 stolen ' .. id .. ' ' .. #LOCK .. ' ' .. LOCK .. ARGV[5])
return {1, fence, holder_id(owner)}
