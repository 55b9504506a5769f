-- Hand a lock from its holder straight to a waiter of the same process, in one step: what a
-- release followed by that waiter's acquire would do, without the lock ever being free. Only
-- when nobody else was told the lock is busy (`waiting=0`), or when fair waiters are in line
-- (`waiting=2`) and the waiter is the first of them: otherwise it is released as release.lua
-- does, and everyone competes (or the first in line has it).
--
-- KEYS[1]  the lock (see acquire.lua)
-- KEYS[2]  the line of fair waiters, and KEYS[3] when their entries end (see queue.lua)
-- KEYS[4]  the fencing token counter of the lock's slot (see queue.lua)
-- ARGV[1]  the holder's owner token
-- ARGV[2]  the waiter's owner token
-- ARGV[3]  the waiter's lease in milliseconds
-- ARGV[4]  who holds it, as acquire.lua's ARGV[3]
-- ARGV[5]  how a release announces itself, as release.lua's ARGV[3]
-- ARGV[6]  how long a lock freed for the first in line waits for it, as release.lua's ARGV[4]
--
-- Returns  {1, fencing token}  handed over: the waiter holds it now
--          {-2, 0}             the counter holds something tokens cannot continue from: left
--                              untouched
--          {2, 0}              released instead (someone else waits), as release.lua's 1
--          {0, 0}              not the holder's: left untouched
--          {-1, 0}             no lock at the key (it expired, or was released already)
--
-- Redis calls: GET, INCR, SET (a release instead: GET, DEL, PUBLISH); with fair waiters in line,
-- finding the first of them (see queue.lua).
-- Sent with no keys only to put the script in the server's cache (by a client whose user may
-- not run SCRIPT LOAD): does nothing.
if #KEYS == 0 then
  return 0
end
-- The rights of every path, before anything is written (see rights.lua).
may(KEYS[1], 'GET', 'SET', 'DEL')
may_count(KEYS[4])
local held, lock = held_by(KEYS[1], ARGV[1])
if held == 'gone' then
  return {-1, 0}
elseif held ~= 'ours' then
  return {0, 0}
end

if lock.waiting == '2' then
  may_serve(KEYS[2], KEYS[3])
  may(KEYS[2], 'ZCARD')
end
-- The waiter's token first: a counter tokens cannot continue from leaves everything as it is.
local fence = next_token(KEYS[4])
if not fence then
  return {-2, 0}
end
local waiting = lock.waiting
local waiting_next = '0'
if waiting == '2' then
  local _, time = server_time()
  local now_ms = millis(time)
  -- Fair waiters are in line: only the first of them may have it.
  local head = first_in_line(KEYS[2], KEYS[3], now_ms)
  if head == ARGV[2] then
    leave_line(KEYS[2], KEYS[3], head)
    -- As in acquire.lua: once the line is empty, waiters told the lock is busy before it
    -- formed hear of the next release.
    if redis.call('ZCARD', KEYS[2]) > 0 then
      waiting_next = '2'
    else
      waiting_next = '1'
    end
  elseif head then
    free_for(KEYS[1], KEYS[3], head, now_ms, tonumber(ARGV[6]), ARGV[5])
    return {2, 0}
  else
    waiting = '1'
  end
end
if waiting == '1' then
  -- Someone elsewhere waits: give them their chance, as a release does.
  redis.call('DEL', KEYS[1])
  announce(KEYS[1], token_id(ARGV[1]), ARGV[5])
  return {2, 0}
end

redis.call('SET', KEYS[1], held_value(ARGV[2], waiting_next, ARGV[4]), 'PX', ARGV[3])
return {1, fence}
