-- Hand a fencing token to a lock the acquire's transaction took when the slot's counter had
-- none to give (absent, or lost: its INCR answered below SEEDED, see queue.lua's next_token):
-- the counter starts again from the server time, and the lock stays taken.
--
-- KEYS[1]  the lock
-- KEYS[2]  the fence counter of its slot
-- ARGV[1]  the value the transaction wrote
--
-- Returns  the fencing token
--          0   the lock holds something else now (it expired, or was deleted): not taken
--          -2  the counter holds something tokens cannot continue from
--
-- Redis calls: GET, INCR, TIME, SET.
-- Sent with no keys only to put the script in the server's cache: does nothing.
if #KEYS == 0 then
  return 0
end
-- Its rights, before anything is written (see rights.lua).
may(KEYS[1], 'GET')
may_count(KEYS[2])
local value = redis.pcall('GET', KEYS[1])
if other_type(value) or value ~= ARGV[1] then
  return 0
end
local fence = next_token(KEYS[2])
if not fence then
  return -2
end
return fence
