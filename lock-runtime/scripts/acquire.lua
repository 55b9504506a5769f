-- Acquire a lock, or say how long its current holder still has it.
--
-- KEYS[1]  the lock: a string that exists while the lock is held, in one of three forms
--            held fence=<F> token=<owner token> waiting=<0|1>[ since=<ms> host=<h> pid=<p> app=<a>]
--            kept fence=<F> waiting=<0|1>    released, busy until it expires (hold_at_least)
--            free fence=<F>                  released: only keeps the last fencing token
--          so that `GET` shows who holds it. `waiting=1` says that someone was told the lock is
--          busy since it was taken: only then does the release announce itself.
-- KEYS[2]  the fence counter written by versions before this format (`<lock>:fence`): read, never
--          written, when KEYS[1] is absent, so that tokens go on rising across an upgrade
-- ARGV[1]  owner token (a UUID v4, unique per acquisition)
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  who holds it, " host=<h> pid=<p> app=<a>" ("" when holder metadata is off)
-- ARGV[4]  "1" if the caller waited for this lock: others of its process may still wait, so its
--          release must announce itself; "0" otherwise
--
-- Returns  {1, fencing token, 0}  acquired (also when ARGV[1] already holds it: the lease is
--                                 refreshed)
--          {0, pttl, holder}      held by another owner (or kept); pttl is the remaining lease in
--                                 ms; holder is 48 bits of the SHA-1 of the owner's token, the same
--                                 on every server for one owner and useless for taking the lock
--                                 over, so that Redlock can tell one owner's majority from masters
--                                 split between contenders
--          {-1, 0, 0}             the key holds data that is not a lock: left untouched
--          {-2, 0, 0}             the last fencing token (in the lock or the old counter) is one
--                                 tokens cannot continue from (not a number, or 2^53 and above):
--                                 left untouched
--
-- The fencing token is max(last + 1, server time in microseconds), `last` being the token the
-- key (or the old counter) still records: strictly increasing while the key exists, and rising
-- with the server clock after it expired.
--
-- Redis calls: a free or absent lock costs GET, TIME, SET (one more GET of the old counter when
-- the key is absent); a busy one GET, PTTL, and a SET the first time someone is told.
-- Sent with no keys only to put the script in the server's cache (by a client whose user may
-- not run SCRIPT LOAD): does nothing.
if #KEYS == 0 then
  return 0
end
local MAX_FENCE = 9007199254740991

local function holder_id(owner)
  return tonumber(string.sub(redis.sha1hex(owner), 1, 12), 16)
end

local value = redis.pcall('GET', KEYS[1])
if type(value) == 'table' then
  -- Not a string. A lock taken by a version before this format is a hash with a `token` and
  -- an expiry: it is held until it expires, never overwritten. Anything else is not ours.
  if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then
    return {-1, 0, 0}
  end
  local owner = redis.call('HGET', KEYS[1], 'token')
  local pttl = redis.call('PTTL', KEYS[1])
  if not owner or pttl < 0 then
    return {-1, 0, 0}
  end
  return {0, pttl, holder_id(owner)}
end

local last = 0
if value then
  local state, fence, rest = string.match(value, '^(%l+) fence=(%d+)(.*)$')
  if not state or (state ~= 'held' and state ~= 'kept' and state ~= 'free') then
    return {-1, 0, 0}
  end
  last = tonumber(fence)
  if last >= MAX_FENCE then
    return {-2, 0, 0}
  end
  if state ~= 'free' then
    local owner, waiting
    if state == 'held' then
      owner, waiting = string.match(rest, '^ token=(%S+) waiting=(%d)')
    else
      owner, waiting = '', string.match(rest, '^ waiting=(%d)')
    end
    if not owner or not waiting then
      return {-1, 0, 0}
    end
    if state == 'held' and owner == ARGV[1] then
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
      return {1, last, 0}
    end
    local pttl = redis.call('PTTL', KEYS[1])
    if pttl < 0 then
      -- A lock always has an expiry: without one this is someone else's data.
      return {-1, 0, 0}
    end
    if pttl > 0 and waiting == '0' then
      -- From now on the release announces itself.
      -- (pcall: a server out of memory refuses it; waiters then wait for the lease.)
      redis.pcall('SET', KEYS[1], (string.gsub(value, ' waiting=0', ' waiting=1', 1)), 'PX', pttl)
    end
    return {0, pttl, holder_id(owner)}
  end
else
  local stored = redis.call('GET', KEYS[2])
  if stored then
    last = tonumber(stored)
    -- Not a number, or too large for a Lua number to count on exactly (2^53): handing out a
    -- token from it could make tokens go down. Leave it, and the lock, untouched.
    -- (`last ~= last` is NaN, which tonumber accepts and every comparison lets through.)
    if not last or last ~= last or last < 0 or last >= MAX_FENCE then
      return {-2, 0, 0}
    end
  end
end

-- Redis 5+ replicates a script by its effects, so reading TIME before writing is allowed.
-- The token is built as text: the server time in microseconds is the seconds followed by the
-- microseconds on six digits, and it wins over `last + 1` in all but rare cases. (Lua numbers
-- are doubles: exact up to 2^53, but printing one with %.0f costs more than the rest of the
-- script.)
local time = redis.call('TIME')
local now = time[1] .. string.sub('00000' .. time[2], -6)
local fence = now
if last > 0 and tonumber(now) <= last then
  fence = string.format('%.0f', last + 1)
end
local holder = ''
if ARGV[3] ~= '' then
  holder = ' since=' .. string.sub(now, 1, -4) .. ARGV[3]
end
redis.call('SET', KEYS[1],
  'held fence=' .. fence .. ' token=' .. ARGV[1] .. ' waiting=' .. ARGV[4] .. holder,
  'PX', ARGV[2])
return {1, fence, 0}
