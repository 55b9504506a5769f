-- The user's rights, as the scripts see them (this text is put in front of every script).
--
-- A command the user may not run (an ACL without it, or without the key) stops a script where
-- it is called, after the writes before it were applied: a fair release would free the lock
-- and never tell the first in line. So each script asks, before its first write, about every
-- command it may run from there on, and fails naming the first one refused, having written
-- nothing. redis.acl_check_cmd came with Redis 7.0 (Valkey has it too); before it (Redis 6.x,
-- whose ACLs refuse commands as well) nothing is asked ahead, and a refused command stops the
-- script with the server's own error, which the client reports as a refused command too.
local acl_check_cmd = redis.acl_check_cmd

-- What each command is asked about with after its key: enough arguments for its arity, which
-- Redis 8 checks (`Wrong number of args`), 7.0 does not. Commands absent here take the key
-- alone (GET, DEL, INCR, PTTL, EXISTS, ZCARD, PERSIST, TYPE, HGETALL) or nothing (TIME).
local ASKED_WITH = {
  SET = {'0'}, PEXPIRE = {'0'}, ZREM = {'0'}, ZSCORE = {'0'}, HDEL = {'0'}, HGET = {'0'},
  ZADD = {'0', '0'}, ZRANGE = {'0', '0'}, ZRANGEBYSCORE = {'0', '0'},
  ZREMRANGEBYSCORE = {'0', '0'}, HSET = {'0', '0'},
}
local NOTHING = {}

-- Raises the error of the first of the commands `...` that this user may not run on `key` (nil:
-- on no key), before the script wrote anything. The error reads as the server's own refusal
-- (`NOPERM ... run the '<command>' command`), so that the client names the command alike.
-- Each command is asked about with its first key only: only commands whose keys start there
-- (never one whose keys follow a count, as EVALSHA's do: Redis 7.0 reads the count even where
-- it is missing, and crashes).
local function may(key, ...)
  if not acl_check_cmd then
    return
  end
  for i = 1, select('#', ...) do
    local command = select(i, ...)
    local allowed
    if key then
      allowed = acl_check_cmd(command, key, unpack(ASKED_WITH[command] or NOTHING))
    else
      allowed = acl_check_cmd(command)
    end
    if not allowed then
      error({err = "NOPERM this user has no permissions to run the '" .. string.lower(command)
        .. "' command" .. (key and (' on the key ' .. key) or '')
        .. ' (the lock script asked before writing anything, and wrote nothing)'})
    end
  end
end

-- Whether `answer`, what a `redis.pcall` answered, says the key holds another kind of data
-- (`WRONGTYPE`), which the scripts report as data that is not theirs. Any other error (a
-- refused command, a server out of memory) is raised as it is: it is not about the data.
local function other_type(answer)
  if type(answer) ~= 'table' or not answer.err then
    return false
  end
  if string.find(answer.err, 'WRONGTYPE', 1, true) then
    return true
  end
  error(answer)
end
