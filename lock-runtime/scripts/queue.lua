-- Functions shared by the scripts that take, release, hand over, leave and force-release a lock
-- (this text is put in front of each of them, after rights.lua and value.lua): its fencing
-- tokens, freeing it, and the line of fair waiters (`fair = true`).
--
-- A lock's line is two sorted sets in the lock's cluster slot, holding the owner tokens of the
-- waiters:
--   <lock>:queue          in the order they came (score: the server time, in microseconds, when
--                         each first asked)
--   <lock>:queue:expiry   when each entry ends (score: server time in milliseconds): one lease of
--                         its waiter after its last attempt. A waiter that is still there asks
--                         again well before that; one that died leaves the line by this alone.
-- Both sets vanish when the line is empty, and expire when its longest entry does.
--
-- While someone is in line the lock says so: `waiting=2` in a held or kept lock. A release then
-- frees it for the first in line only, for a short while,
--   free next=<owner token> until=<server time in ms>
-- and names that waiter on the lock's channel (`q:` and the `token_id` of its token).
-- If it does not come in time (it died, or missed the message), the next caller takes it out of
-- line and frees the lock for the one behind it: a dead waiter costs the others one such while,
-- once.

-- The server time in microseconds, as text (see acquire.lua), and as TIME answered it.
local function server_time()
  local time = redis.call('TIME')
  return time[1] .. string.sub('00000' .. time[2], -6), time
end

-- A time TIME answered, in milliseconds.
local function millis(time)
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- The rights of serving the line of fair waiters (`queue`, `expiry`): leaving it, finding the
-- first in line and freeing the lock for it (`first_in_line`, `leave_line`, `free_for`: TIME,
-- and ZSCORE, the call a fair release once stopped at after freeing the lock). Asked before a
-- script's first write on a path that may touch the line (see rights.lua).
local function may_serve(queue, expiry)
  may(nil, 'TIME')
  may(queue, 'ZREM', 'ZRANGE')
  may(expiry, 'ZRANGEBYSCORE', 'ZREM', 'ZSCORE', 'ZADD')
end

-- The rights of every use of the line: serving it, counting it and joining it (`join_line`).
local function may_line(queue, expiry)
  may_serve(queue, expiry)
  may(queue, 'ZADD', 'ZCARD', 'PEXPIRE')
  may(expiry, 'PTTL', 'PEXPIRE')
end

-- The rights `next_token` needs on the slot's counter `counter` (see rights.lua).
local function may_count(counter)
  may(nil, 'TIME')
  may(counter, 'INCR', 'SET')
end

-- The rights `take_over_fence` and `next_token` need, for a grant from `counter` that takes over
-- `old` (see rights.lua).
local function may_take_over(counter, old)
  may_count(counter)
  if old == counter then
    may(counter, 'PERSIST')
  else
    may(counter, 'GET')
    may(old, 'GET', 'DEL')
  end
end

-- Tokens below this (10^15 µs: September 2001) come from a counter that was lost (never
-- seeded, evicted, flushed): the counter starts again from the server's clock.
local SEEDED = 1000000000000000

-- The next fencing token of the slot's counter `counter` (one per cluster slot and key prefix,
-- never expiring): one above the last. A counter that is absent or was lost (below SEEDED)
-- starts again from the server time in µs, above every token handed out before while the clock
-- does not go back. nil if the counter holds something tokens cannot continue from: not an
-- integer, negative, or 2^53 and above (Lua numbers are exact below it). With `clocked`, the
-- token is also at least the server time in µs, and the counter follows it.
local function next_token(counter, clocked)
  local next = redis.pcall('INCR', counter)
  if type(next) == 'table' and not string.find(next.err, 'integer')
      and not string.find(next.err, 'overflow') then
    -- Not about the value (out of memory, say): the caller's error.
    error(next)
  end
  if type(next) ~= 'number' or next < 1 or next >= 9007199254740991 then
    return nil
  end
  if next >= SEEDED and not clocked then
    return next
  end
  local now = server_time()
  if next >= tonumber(now) then
    return next
  end
  redis.call('SET', counter, now)
  return tonumber(now)
end

-- Raises the counter to at least `fence`, a token an earlier version recorded, so that tokens
-- never go down across a rolling upgrade. false if the counter or `fence` cannot be counted on.
local function raise_counter(counter, fence)
  local last = redis.pcall('GET', counter)
  if other_type(last) then
    return false
  end
  last = tonumber(last or 0)
  fence = tonumber(fence)
  if not last or last ~= last or not fence or fence ~= fence or fence < 0
      or fence >= 9007199254740991 then
    return false
  end
  if last < fence then
    redis.call('SET', counter, fence)
  end
  return true
end

local function announce(lock, message, how)
  if how == 'sharded' then
    -- pcall: see release.lua.
    redis.pcall('SPUBLISH', lock, message)
  elseif how ~= 'quiet' then
    redis.pcall('PUBLISH', lock, message)
  end
end

-- Keeps the busy marker `key` (semaphore.lua's and rw_acquire.lua's): while it exists, releases
-- announce themselves. It lasts at least `ms` more from now, and is never shortened: each waiter
-- told busy relies on it until it looks again, and one with a longer wait than the caller's may
-- have set it. (pcall: a server out of memory refuses it; waiters then wait for the lease they
-- were told of.)
local function keep_marker(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.pcall('SET', key, '1', 'PX', ms)
  end
end

-- The first in line whose entry has not ended, dropping those that have.
local function first_in_line(queue, expiry, now_ms)
  local ended = redis.call('ZRANGEBYSCORE', expiry, '-inf', '(' .. now_ms, 'LIMIT', 0, 100)
  if #ended > 0 then
    redis.call('ZREM', queue, unpack(ended))
    redis.call('ZREM', expiry, unpack(ended))
  end
  return redis.call('ZRANGE', queue, 0, 0)[1]
end

-- Puts `token` at the end of the line (or keeps its place) for `ttl_ms` more.
local function join_line(queue, expiry, token, now_us, now_ms, ttl_ms)
  redis.call('ZADD', queue, 'NX', now_us, token)
  redis.call('ZADD', expiry, now_ms + ttl_ms, token)
  if redis.call('PTTL', expiry) < ttl_ms then
    redis.call('PEXPIRE', queue, ttl_ms)
    redis.call('PEXPIRE', expiry, ttl_ms)
  end
end

local function leave_line(queue, expiry, token)
  redis.call('ZREM', queue, token)
  redis.call('ZREM', expiry, token)
end

-- Frees the lock for `head` alone until `window_ms` from now, and tells it. The head's place in
-- line ends with its turn: if it does not come, it leaves the line then.
local function free_for(lock, expiry, head, now_ms, window_ms, how)
  local until_ms = now_ms + window_ms
  -- Read before the lock is written (see rights.lua).
  local ends = tonumber(redis.call('ZSCORE', expiry, head))
  local freed = redis.pcall('SET', lock, free_value(head, until_ms), 'PX', window_ms)
  if type(freed) == 'table' and freed.err then
    -- Out of memory: free it for anyone (DEL needs no memory).
    redis.call('DEL', lock)
  end
  if ends and ends > until_ms then
    redis.call('ZADD', expiry, until_ms, head)
  end
  announce(lock, 'q:' .. token_id(head), how)
end

-- Frees the lock for the first in line of KEYS `queue` and `expiry` if anyone is in line, as
-- `free_for` does, and returns that waiter; with nobody in line deletes it and returns nil (the
-- caller announces the release).
local function free_for_next(lock, queue, expiry, window_ms, how)
  local _, time = server_time()
  local now_ms = millis(time)
  local head = first_in_line(queue, expiry, now_ms)
  if head then
    free_for(lock, expiry, head, now_ms, window_ms, how)
  else
    redis.call('DEL', lock)
  end
  return head
end

-- Takes over `old`, the key where 0.2 kept the last fencing token of a semaphore or a read-write
-- lock (`<key>:sem:fence`, `<key>:rw:fence`, expiring its fence_retention after each grant), for
-- semaphore.lua and rw_acquire.lua before they take a token from `counter`: raises the counter
-- to the token it holds, so that the next one is above it whatever the server's clock says, and
-- deletes it, so that nothing of a released semaphore or read-write lock is left.
-- Costs one GET (of a key that is absent once the upgrade is done). Returns false, leaving both
-- as they are, if `old` holds something tokens cannot continue from.
local function take_over_fence(counter, old)
  if old == counter then
    -- A prefix whose braces keep the counter beside the key (see protocol/slots.rs) names the
    -- same key: it only needs to outlive the expiry an earlier version gave it.
    redis.call('PERSIST', counter)
    return true
  end
  local last = redis.pcall('GET', old)
  if other_type(last) then
    return false
  end
  if not last then
    return true
  end
  if not raise_counter(counter, last) then
    return false
  end
  redis.call('DEL', old)
  return true
end
