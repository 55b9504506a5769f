-- Acquire a lock, or say how long its current holder still has it: the path of a lock that is
-- busy, awaited, in a fair line, or on a server without `SET ... NX GET`. A free lock is
-- usually taken without a script, in one transaction (see protocol/lean.rs), which writes the
-- same value and takes its token from the same counter.
--
-- KEYS[1]  the lock: a string that exists while the lock is held, in one of the forms value.lua
--          reads and writes. The forms 0.2 wrote (`held fence=<F> token=...`, `kept fence=<F>
--          ...`, `free fence=<F>[ next=...]`) are read too: a held or kept one is busy until it
--          expires, a free one is taken over, and the counter is raised to its token first.
-- KEYS[2]  the fencing token counter of the lock's slot (see queue.lua's next_token)
-- KEYS[3]  the line of fair waiters, and KEYS[4] when their entries end (see queue.lua)
-- KEYS[5]  the fence counter of a version before 0.2 (`<lock>:fence`): read only while such a
--          version holds the lock, to raise KEYS[2] above it
-- ARGV[1]  owner token (a UUID v4, unique per acquisition)
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  who holds it, " since=<ms> host=<h> pid=<p> app=<a>" ("" when holder metadata is off)
-- ARGV[4]  "1" if the caller waited for this lock: others of its process may still wait, so its
--          release must announce itself; "0" otherwise
-- ARGV[5]  "fair": the caller waits in line if the lock is busy; "line": it waits, and joins the
--          line if there is one; "": it does not wait (it still never jumps the line)
-- ARGV[6]  how long (ms) a lock freed for the first in line waits for it
-- ARGV[7]  how the first in line is told, as release.lua's ARGV[3]
-- ARGV[8]  "clock": the token is also at least the server time in µs (a Redlock master, whose
--          tokens are compared with the other masters' through their clocks); "" otherwise
--
-- Returns  {1, fencing token, waiting, 0}
--                                 acquired (also when ARGV[1] already holds it: the lease is
--                                 refreshed and a new token handed out); waiting is the flag
--                                 written: 0 lets the holder release by comparing the value
--          {0, pttl, holder, line, recorded}
--                                 held by another owner (or kept, or freed for the first in
--                                 line); pttl is how long that lasts in ms; holder is 48 bits of
--                                 the SHA-1 of the owner's token (0 if none), the same on every
--                                 server for one owner and useless for taking the lock over, so
--                                 that Redlock can tell one owner's majority from masters split
--                                 between contenders; line is 1 if the caller is in line now;
--                                 recorded is what a held lock's value says of its holder, for
--                                 the caller's error: the value without its owner token
--                                 (`held[ fence=<F>] waiting=<W> since=<ms> host=<h> pid=<p>
--                                 app=<a>`), or '' where it records no holder metadata
--          {-1, 0, 0, 0}          the key holds data that is not a lock: left untouched
--          {-2, 0, 0, 0}          the counter (or a 0.2 value's token) holds something tokens
--                                 cannot continue from: left untouched
--
-- Redis calls: a free or absent lock costs GET, ZCARD, SET, INCR; a busy one GET, PTTL, and a
-- SET the first time someone is told. A line adds its own (see queue.lua).
-- Sent with no keys only to put the script in the server's cache (by a client whose user may
-- not run SCRIPT LOAD): does nothing.
if #KEYS == 0 then
  return 0
end
local LOCK, COUNTER, QUEUE, EXPIRY = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local TOKEN, MODE = ARGV[1], ARGV[5]

-- Every path's rights, before anything is written (see rights.lua); the line's where a path
-- touches it.
may(LOCK, 'GET', 'SET', 'PTTL', 'PEXPIRE')
may_count(COUNTER)
local value = redis.pcall('GET', LOCK)
if other_type(value) then
  -- Not a string. A lock taken by a version before 0.2 is a hash with a `token` and an
  -- expiry: it is held until it expires, never overwritten. Anything else is not ours.
  may(LOCK, 'TYPE', 'HGET')
  may(KEYS[5], 'GET')
  may(COUNTER, 'GET')
  if redis.call('TYPE', LOCK)['ok'] ~= 'hash' then
    return {-1, 0, 0, 0}
  end
  local owner = redis.call('HGET', LOCK, 'token')
  local pttl = redis.call('PTTL', LOCK)
  if not owner or pttl < 0 then
    return {-1, 0, 0, 0}
  end
  -- Its tokens came from the counter beside it: the next ones continue above it.
  local old = redis.call('GET', KEYS[5])
  if old and not raise_counter(COUNTER, old) then
    return {-2, 0, 0, 0}
  end
  return {0, pttl, holder_id(owner), 0, ''}
end

-- Set when the lock is free but fair waiters may be in line: who it was freed for, and until when.
local line, reserved, until_ms = false, nil, 0
if value then
  local lock = read_lock(value)
  if not lock then
    return {-1, 0, 0, 0}
  end
  if lock.fence then
    may(COUNTER, 'GET')
  end
  if lock.fence and not raise_counter(COUNTER, lock.fence) then
    return {-2, 0, 0, 0}
  end
  if lock.state ~= 'free' then
    local owner, waiting = lock.owner or '', lock.waiting
    if lock.state == 'held' and owner == TOKEN then
      local fence = next_token(COUNTER, ARGV[8] == 'clock')
      if not fence then
        return {-2, 0, 0, 0}
      end
      redis.call('PEXPIRE', LOCK, ARGV[2])
      return {1, fence, tonumber(waiting), 0}
    end
    local pttl = redis.call('PTTL', LOCK)
    if pttl < 0 then
      -- A lock always has an expiry: without one this is someone else's data.
      return {-1, 0, 0, 0}
    end
    if MODE == 'fair' or (MODE == 'line' and waiting == '2') then
      may_line(QUEUE, EXPIRY)
      local now_us, time = server_time()
      join_line(QUEUE, EXPIRY, TOKEN, now_us, millis(time), tonumber(ARGV[2]))
      if waiting ~= '2' and pttl > 0 then
        -- From now on the release frees it for the first in line. (pcall: see below.)
        redis.pcall('SET', LOCK, with_waiting(value, '2'), 'PX', pttl)
      end
      return {0, pttl, holder_id(owner), 1, recorded(value)}
    end
    if pttl > 0 and waiting == '0' then
      -- From now on the release announces itself.
      -- (pcall: a server out of memory refuses it; waiters then wait for the lease.)
      redis.pcall('SET', LOCK, with_waiting(value, '1'), 'PX', pttl)
    end
    return {0, pttl, holder_id(owner), 0, recorded(value)}
  end
  reserved, until_ms = lock.next, lock.until_ms
  line = reserved ~= nil
else
  -- A lock that expired while fair waiters were in line leaves them there. (pcall: a user
  -- without rights on sorted sets, which only fair waiting needs, has no line.)
  local waiters = redis.pcall('ZCARD', QUEUE)
  line = type(waiters) == 'number' and waiters > 0
end

local waiting = ARGV[4]
if line then
  may_line(QUEUE, EXPIRY)
end
if line and reserved ~= TOKEN then
  -- Free, but maybe not for this caller: the first in line has it.
  local now, time = server_time()
  local now_ms, ttl = millis(time), tonumber(ARGV[2])
  if reserved and now_ms < tonumber(until_ms) then
    if MODE ~= '' then
      join_line(QUEUE, EXPIRY, TOKEN, now, now_ms, ttl)
    end
    return {0, tonumber(until_ms) - now_ms, 0, MODE ~= '' and 1 or 0, ''}
  end
  if reserved then
    -- It was freed for someone who did not come in time: out of line, the next one's turn.
    leave_line(QUEUE, EXPIRY, reserved)
  end
  local head = first_in_line(QUEUE, EXPIRY, now_ms)
  if head and head ~= TOKEN then
    free_for(LOCK, EXPIRY, head, now_ms, tonumber(ARGV[6]), ARGV[7])
    if MODE ~= '' then
      join_line(QUEUE, EXPIRY, TOKEN, now, now_ms, ttl)
    end
    return {0, tonumber(ARGV[6]), 0, MODE ~= '' and 1 or 0, ''}
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
local fence = next_token(COUNTER, ARGV[8] == 'clock')
if not fence then
  return {-2, 0, 0, 0}
end
redis.call('SET', LOCK, held_value(TOKEN, waiting, ARGV[3]), 'PX', ARGV[2])
return {1, fence, tonumber(waiting), 0}
