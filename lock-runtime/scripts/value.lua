-- The stored value of a lock (this text is put in front of every script, after rights.lua): how
-- it is written and read, and the short id of an owner token. protocol/value.rs writes and reads
-- the same text; its round-trip test runs the scripts against it.
--
-- A lock is a string that exists while it is held, so that `GET` shows who holds it:
--   held token=<owner token> waiting=<0|1|2>[ since=<ms> host=<h> pid=<p> app=<a>]
--   kept waiting=<0|1|2>               released, busy until it expires (hold_at_least)
--   free next=<owner token> until=<ms> released for the first in the line of fair waiters
--                                      alone, until then (server time; see queue.lua)
-- `waiting=1` says that someone was told the lock is busy since it was taken: only then does the
-- release announce itself; `waiting=2` that fair waiters are in line: the release frees it for
-- the first of them. The holder's part (` since=...`, `app` running to the end) is what the
-- client sends, or nothing with holder metadata off.
--
-- ` fence=<F>` after the state carries the holder's fencing token: in the forms 0.2 wrote for
-- locks (`held fence=<F> token=...`, `kept fence=<F> ...`, `free fence=<F>[ next=...]`), and in
-- a read-write lock's writer (`held fence=<F> token=<T> waiting=0`), whose script knows its
-- token when it writes it. A lock's own value cannot hold it: its token comes from the slot's
-- counter in the step that writes the value (see queue.lua's next_token). 0.2 and 0.3 wrote the
-- writer as `held fence=<F> token=<T>`, without the flag; it reads as `waiting=0`.

-- 12 hex digits of the SHA-1 of an owner token: tells holders apart, and is how a release names
-- itself on the lock's channel, but cannot be turned back into the token.
local function token_id(token)
  return string.sub(redis.sha1hex(token), 1, 12)
end

-- The same 48 bits as a number, as an acquire's busy answer names the holder.
local function holder_id(token)
  return tonumber(token_id(token), 16)
end

-- A lock's value, read: `state` ('held', 'kept' or 'free'), the `owner` token of a held lock,
-- the `waiting` flag of a held or kept one, the waiter a free one is kept for (`next`) and until
-- when (`until_ms`), and `fence`, the fencing token after the state; nil if the value is not a
-- lock.
local function read_lock(value)
  -- Read by positions (`()`), copying out only the fields: renew.lua reads a value per lease
  -- per renewal.
  local state, at = string.match(value, '^(%l+)()')
  if state ~= 'held' and state ~= 'kept' and state ~= 'free' then
    return nil
  end
  local fence, after = string.match(value, '^ fence=(%d+)()', at)
  if fence then
    at = after
  end
  if state == 'held' then
    local owner, tail = string.match(value, '^ token=(%S+)()', at)
    if not owner then
      return nil
    end
    local waiting = string.match(value, '^ waiting=(%d)', tail)
    if not waiting and fence and tail > #value then
      -- A read-write lock's writer as 0.2 and 0.3 wrote it.
      waiting = '0'
    end
    if not waiting then
      return nil
    end
    return {state = state, fence = fence, owner = owner, waiting = waiting}
  elseif state == 'kept' then
    local waiting = string.match(value, '^ waiting=(%d)', at)
    if not waiting then
      return nil
    end
    return {state = state, fence = fence, waiting = waiting}
  elseif at > #value then
    return {state = state, fence = fence}
  end
  local head, until_ms = string.match(value, '^ next=(%S+) until=(%d+)$', at)
  if not head then
    return nil
  end
  return {state = state, fence = fence, next = head, until_ms = until_ms}
end

-- The lock at `lock` if `token` holds it: 'ours' and the lock as `read_lock` reads it; 'gone' if
-- there is no lock (absent or free); 'other' if someone else holds or keeps it, or the key
-- holds data that is not a lock.
local function held_by(lock, token)
  local value = redis.pcall('GET', lock)
  if other_type(value) then
    return 'other'
  end
  if not value then
    return 'gone'
  end
  local read = read_lock(value)
  if not read then
    return 'other'
  end
  if read.state == 'free' then
    return 'gone'
  end
  if read.owner ~= token then
    return 'other'
  end
  return 'ours', read
end

-- The value of a held lock: `held token=<T> waiting=<W>` and what the client says of the holder
-- (` since=<ms> host=<h> pid=<p> app=<a>`, or nothing with holder metadata off), the same text
-- the client builds, so that a release compares the whole value and deletes it. With `fence` (a
-- read-write lock's writer), ` fence=<F>` after the state. (%.0f: Lua would write a 16-digit
-- number with an exponent.)
local function held_value(token, waiting, holder, fence)
  if fence then
    return 'held fence=' .. string.format('%.0f', fence) .. ' token=' .. token .. ' waiting='
      .. waiting .. holder
  end
  return 'held token=' .. token .. ' waiting=' .. waiting .. holder
end

-- `value`, a held or kept lock, with its `waiting` flag set to `waiting`.
local function with_waiting(value, waiting)
  return (string.gsub(value, ' waiting=%d', ' waiting=' .. waiting, 1))
end

-- The value of a lock released but kept busy until it expires (hold_at_least).
local function kept_value(waiting)
  return 'kept waiting=' .. waiting
end

-- The value of a lock freed for the fair waiter `head` alone until `until_ms` (server time).
local function free_value(head, until_ms)
  return 'free next=' .. head .. ' until=' .. until_ms
end

-- What a held lock's value records of its holder, for a caller told it is busy: the value
-- without its owner token, which would let the caller release the lock; '' where it records no
-- holder metadata.
local function recorded(value)
  if not string.find(value, ' since=', 1, true) then
    return ''
  end
  return (string.gsub(value, ' token=%S+', '', 1))
end
