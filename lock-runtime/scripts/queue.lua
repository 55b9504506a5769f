-- Functions shared by the scripts that take, release, hand over, leave and force-release a lock
-- (this text is put in front of each of them): reading a lock, freeing it, and the line of fair
-- waiters (`fair = true`).
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
--   free fence=<F> next=<owner token> until=<server time in ms>
-- and names that waiter on the lock's channel (`q:` and 12 hex digits of the SHA-1 of its token).
-- If it does not come in time (it died, or missed the message), the next caller takes it out of
-- line and frees the lock for the one behind it: a dead waiter costs the others one such while,
-- once.

-- The lock at `lock` if `token` holds it: 'ours' and its fence, the rest of its value and its
-- waiting flag; 'gone' if there is no lock (absent or free); 'other' if someone else holds or
-- keeps it, or the key holds data that is not a lock.
local function held_by(lock, token)
  local value = redis.pcall('GET', lock)
  if type(value) == 'table' then
    return 'other'
  end
  if not value then
    return 'gone'
  end
  local state, fence, rest = string.match(value, '^(%l+) fence=(%d+)(.*)$')
  if state == 'free' then
    return 'gone'
  end
  local owner, waiting
  if state == 'held' then
    owner, waiting = string.match(rest, '^ token=(%S+) waiting=(%d)')
  end
  if owner ~= token then
    return 'other'
  end
  return 'ours', fence, rest, waiting
end

-- The server time in microseconds, as text (see acquire.lua), and as TIME answered it.
local function server_time()
  local time = redis.call('TIME')
  return time[1] .. string.sub('00000' .. time[2], -6), time
end

-- A time TIME answered, in milliseconds.
local function millis(time)
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
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

-- Frees the lock (last token `fence`) for `head` alone until `window_ms` from now, and tells it.
-- The marker keeps the last fencing token as a release does (`retention_ms`, at least the
-- while itself). The head's place in line ends with its turn: if it does not come, it leaves
-- the line then, even if the marker is gone by then (a short retention).
local function free_for(lock, expiry, fence, head, now_ms, window_ms, retention_ms, how)
  local until_ms = now_ms + window_ms
  redis.pcall('SET', lock,
    'free fence=' .. fence .. ' next=' .. head .. ' until=' .. until_ms,
    'PX', math.max(tonumber(retention_ms), window_ms))
  local ends = tonumber(redis.call('ZSCORE', expiry, head))
  if ends and ends > until_ms then
    redis.call('ZADD', expiry, until_ms, head)
  end
  announce(lock, 'q:' .. string.sub(redis.sha1hex(head), 1, 12), how)
end

-- Frees the lock (last token `fence`), keeping that token for `retention_ms` (0: deletes it).
-- Arguments go to Redis as the client sent them, text: a Lua number costs a conversion.
local function release_free(lock, fence, retention_ms)
  local freed = retention_ms ~= '0' and redis.pcall('SET', lock, 'free fence=' .. fence, 'PX', retention_ms)
  if not freed or (type(freed) == 'table' and freed.err) then
    redis.call('DEL', lock)
  end
end

-- Frees the lock (last token `fence`) for the first in line of KEYS `queue` and `expiry` if
-- anyone is in line, as `free_for` does, and returns that waiter; with nobody in line frees it
-- for anyone, as `release_free` does, and returns nil (the caller announces the release).
local function free_for_next(lock, queue, expiry, fence, window_ms, retention_ms, how)
  local _, time = server_time()
  local now_ms = millis(time)
  local head = first_in_line(queue, expiry, now_ms)
  if head then
    free_for(lock, expiry, fence, head, now_ms, window_ms, retention_ms, how)
  else
    release_free(lock, fence, retention_ms)
  end
  return head
end

-- The next fencing token of the counter at `key` (semaphore.lua, rw_acquire.lua): above the last
-- one, and the server time in µs when that is higher, as acquire.lua's. Returns nil and the code
-- to answer when the stored value cannot be counted on: -1 for a value that is not a string,
-- -2 for one that is not a number below 2^53 (tokens could then go down).
local function next_fence(key, now_us)
  local last = 0
  local stored = redis.pcall('GET', key)
  if type(stored) == 'table' then
    return nil, -1
  end
  if stored then
    last = tonumber(stored)
    if not last or last ~= last or last < 0 or last >= 9007199254740991 then
      return nil, -2
    end
  end
  if last > 0 and tonumber(now_us) <= last then
    return string.format('%.0f', last + 1)
  end
  return now_us
end
