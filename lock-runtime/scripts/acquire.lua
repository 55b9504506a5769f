-- Acquire a lock, or say how long its current holder still has it.
--
-- KEYS[1]  the lock: a string that exists while the lock is held, in one of these forms
--            held fence=<F> token=<owner token> waiting=<0|1|2>[ since=<ms> host=<h> pid=<p> app=<a>]
--            kept fence=<F> waiting=<0|1|2>  released, busy until it expires (hold_at_least)
--            free fence=<F>                  released: only keeps the last fencing token
--            free fence=<F> next=<owner token> until=<ms>
--                                            released for the first in the line of fair waiters
--                                            alone, until then (server time; see queue.lua)
--          so that `GET` shows who holds it. `waiting=1` says that someone was told the lock is
--          busy since it was taken: only then does the release announce itself; `waiting=2`
--          that fair waiters are in line: the release frees it for the first of them.
-- KEYS[2]  the fence counter written by versions before this format (`<lock>:fence`): read, never
--          written, when KEYS[1] is absent, so that tokens go on rising across an upgrade
-- KEYS[3]  the line of fair waiters, and KEYS[4] when their entries end (see queue.lua)
-- ARGV[1]  owner token (a UUID v4, unique per acquisition)
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  who holds it, " host=<h> pid=<p> app=<a>" ("" when holder metadata is off)
-- ARGV[4]  "1" if the caller waited for this lock: others of its process may still wait, so its
--          release must announce itself; "0" otherwise
-- ARGV[5]  "fair": the caller waits in line if the lock is busy; "line": it waits, and joins the
--          line if there is one; "": it does not wait (it still never jumps the line)
-- ARGV[6]  how long (ms) a lock freed for the first in line waits for it
-- ARGV[7]  how the first in line is told, as release.lua's ARGV[3]
-- ARGV[8]  how long a freed lock keeps its last fencing token, as release.lua's ARGV[4]
--
-- Returns  {1, fencing token, 0, 0}  acquired (also when ARGV[1] already holds it: the lease is
--                                 refreshed)
--          {0, pttl, holder, line} held by another owner (or kept, or freed for the first in
--                                 line); pttl is how long that lasts in ms; holder is 48 bits of
--                                 the SHA-1 of the owner's token (0 if none), the same on every
--                                 server for one owner and useless for taking the lock over, so
--                                 that Redlock can tell one owner's majority from masters split
--                                 between contenders; line is 1 if the caller is in line now
--          {-1, 0, 0, 0}          the key holds data that is not a lock: left untouched
--          {-2, 0, 0, 0}          the last fencing token (in the lock or the old counter) is one
--                                 tokens cannot continue from (not a number, or 2^53 and above):
--                                 left untouched
--
-- The fencing token is max(last + 1, server time in microseconds), `last` being the token the
-- key (or the old counter) still records: strictly increasing while the key exists, and rising
-- with the server clock after it expired.
--
-- Redis calls: a free or absent lock costs GET, TIME, SET (one more GET of the old counter and a
-- ZCARD when the key is absent); a busy one GET, PTTL, and a SET the first time someone is told.
-- A line adds its own (see queue.lua).
-- Sent with no keys only to put the script in the server's cache (by a client whose user may
-- not run SCRIPT LOAD): does nothing.
if #KEYS == 0 then
  return 0
end
local MAX_FENCE = 9007199254740991
local LOCK, QUEUE, EXPIRY = KEYS[1], KEYS[3], KEYS[4]
local TOKEN, MODE = ARGV[1], ARGV[5]

local function holder_id(owner)
  return tonumber(string.sub(redis.sha1hex(owner), 1, 12), 16)
end

local value = redis.pcall('GET', LOCK)
if type(value) == 'table' then
  -- Not a string. A lock taken by a version before this format is a hash with a `token` and
  -- an expiry: it is held until it expires, never overwritten. Anything else is not ours.
  if redis.call('TYPE', LOCK)['ok'] ~= 'hash' then
    return {-1, 0, 0, 0}
  end
  local owner = redis.call('HGET', LOCK, 'token')
  local pttl = redis.call('PTTL', LOCK)
  if not owner or pttl < 0 then
    return {-1, 0, 0, 0}
  end
  return {0, pttl, holder_id(owner), 0}
end

local last = 0
-- Set when the lock is free but fair waiters may be in line: who it was freed for, and until when.
local line, reserved, until_ms = false, nil, 0
if value then
  local state, fence, rest = string.match(value, '^(%l+) fence=(%d+)(.*)$')
  if not state or (state ~= 'held' and state ~= 'kept' and state ~= 'free') then
    return {-1, 0, 0, 0}
  end
  last = tonumber(fence)
  if last >= MAX_FENCE then
    return {-2, 0, 0, 0}
  end
  if state ~= 'free' then
    local owner, waiting
    if state == 'held' then
      owner, waiting = string.match(rest, '^ token=(%S+) waiting=(%d)')
    else
      owner, waiting = '', string.match(rest, '^ waiting=(%d)')
    end
    if not owner or not waiting then
      return {-1, 0, 0, 0}
    end
    if state == 'held' and owner == TOKEN then
      redis.call('PEXPIRE', LOCK, ARGV[2])
      return {1, last, 0, 0}
    end
    local pttl = redis.call('PTTL', LOCK)
    if pttl < 0 then
      -- A lock always has an expiry: without one this is someone else's data.
      return {-1, 0, 0, 0}
    end
    if MODE == 'fair' or (MODE == 'line' and waiting == '2') then
      local now_us, time = server_time()
      join_line(QUEUE, EXPIRY, TOKEN, now_us, millis(time), tonumber(ARGV[2]))
      if waiting ~= '2' and pttl > 0 then
        -- From now on the release frees it for the first in line. (pcall: see below.)
        redis.pcall('SET', LOCK, (string.gsub(value, ' waiting=%d', ' waiting=2', 1)), 'PX', pttl)
      end
      return {0, pttl, holder_id(owner), 1}
    end
    if pttl > 0 and waiting == '0' then
      -- From now on the release announces itself.
      -- (pcall: a server out of memory refuses it; waiters then wait for the lease.)
      redis.pcall('SET', LOCK, (string.gsub(value, ' waiting=0', ' waiting=1', 1)), 'PX', pttl)
    end
    return {0, pttl, holder_id(owner), 0}
  end
  reserved, until_ms = string.match(rest, '^ next=(%S+) until=(%d+)')
  line = reserved ~= nil
else
  local stored = redis.call('GET', KEYS[2])
  if stored then
    last = tonumber(stored)
    -- Not a number, or too large for a Lua number to count on exactly (2^53): handing out a
    -- token from it could make tokens go down. Leave it, and the lock, untouched.
    -- (`last ~= last` is NaN, which tonumber accepts and every comparison lets through.)
    if not last or last ~= last or last < 0 or last >= MAX_FENCE then
      return {-2, 0, 0, 0}
    end
  end
  -- A lock that expired while fair waiters were in line leaves them there. (pcall: a user
  -- without rights on sorted sets, which only fair waiting needs, has no line.)
  local waiters = redis.pcall('ZCARD', QUEUE)
  line = type(waiters) == 'number' and waiters > 0
end

-- Redis 5+ replicates a script by its effects, so reading TIME before writing is allowed.
-- The token is built as text: the server time in microseconds is the seconds followed by the
-- microseconds on six digits, and it wins over `last + 1` in all but rare cases. (Lua numbers
-- are doubles: exact up to 2^53, but printing one with %.0f costs more than the rest of the
-- script.)
local now, time = server_time()
local waiting = ARGV[4]
if line and reserved ~= TOKEN then
  -- Free, but maybe not for this caller: the first in line has it.
  local now_ms, ttl = millis(time), tonumber(ARGV[2])
  local fence = string.format('%.0f', last)
  if reserved and now_ms < tonumber(until_ms) then
    if MODE ~= '' then
      join_line(QUEUE, EXPIRY, TOKEN, now, now_ms, ttl)
    end
    return {0, tonumber(until_ms) - now_ms, 0, MODE ~= '' and 1 or 0}
  end
  if reserved then
    -- It was freed for someone who did not come in time: out of line, the next one's turn.
    leave_line(QUEUE, EXPIRY, reserved)
  end
  local head = first_in_line(QUEUE, EXPIRY, now_ms)
  if head and head ~= TOKEN then
    free_for(LOCK, EXPIRY, fence, head, now_ms, tonumber(ARGV[6]), ARGV[8], ARGV[7])
    if MODE ~= '' then
      join_line(QUEUE, EXPIRY, TOKEN, now, now_ms, ttl)
    end
    return {0, tonumber(ARGV[6]), 0, MODE ~= '' and 1 or 0}
  end
end
if line then
  leave_line(QUEUE, EXPIRY, TOKEN)
  -- Waiters without `fair` may have been told the lock is busy before the line formed: once
  -- the line is empty, the release announces itself for them.
  if redis.call('ZCARD', QUEUE) > 0 then
    waiting = '2'
  else
    waiting = '1'
  end
end
local fence = now
if last > 0 and tonumber(now) <= last then
  fence = string.format('%.0f', last + 1)
end
local holder = ''
if ARGV[3] ~= '' then
  holder = ' since=' .. string.sub(now, 1, -4) .. ARGV[3]
end
redis.call('SET', LOCK,
  'held fence=' .. fence .. ' token=' .. TOKEN .. ' waiting=' .. waiting .. holder,
  'PX', ARGV[2])
return {1, fence, 0, 0}
