-- A resource's fence (lock_runtime::fence::redis): a claim or a check of the fence, and one
-- command on the resource's data key, as one step.
--
-- KEYS[1]: the fence key; KEYS[2]: the data key (the same Cluster slot).
-- ARGV[1]: the holder's fencing token, in decimal without leading zeros; ARGV[2]: 'claim' (raise
-- the fence to the token, refused if it is higher) or 'check' (refused unless the fence is the
-- token); ARGV[3]: the holder id, '' for none; ARGV[4]: the command's name, '' for none;
-- ARGV[5..]: its arguments after the data key.
--
-- The fence key holds `<token>`, or `<token> <holder id>` once a holder with an id claimed: at
-- the fence's own token, a holder with another id is refused (the lock's store handed the
-- token out twice), one without an id is not told apart.
--
-- Answers {'ok', the command's reply}, {'stale', fence}, {'unclaimed', fence or ''} or
-- {'error', the server's message}. A refusal changes nothing; a command that fails runs no part
-- of itself (Redis commands are atomic) and leaves the fence as it was.
if redis.replicate_commands then
  -- Redis 5 replicates scripts verbatim unless told: a command whose effect is not a function
  -- of its arguments (SPOP, XADD *) must be replicated as its effects.
  redis.replicate_commands()
end
-- Tokens are compared as decimal text: Lua's numbers lose integers above 2^53.
local function above(a, b)
  if #a ~= #b then
    return #a > #b
  end
  return a > b
end
local token, holder = ARGV[1], ARGV[3]
local stored = redis.call('GET', KEYS[1])
local fence, owner = nil, ''
if stored then
  local space = string.find(stored, ' ', 1, true)
  if space then
    fence, owner = string.sub(stored, 1, space - 1), string.sub(stored, space + 1)
  else
    fence = stored
  end
end
if fence and above(fence, token) then
  return {'stale', fence}
end
if fence == token and owner ~= '' and holder ~= '' and owner ~= holder then
  return {'stale', fence}
end
if ARGV[2] == 'check' and fence ~= token then
  return {'unclaimed', fence or ''}
end
local reply = false
if ARGV[4] ~= '' then
  reply = redis.pcall(ARGV[4], KEYS[2], unpack(ARGV, 5))
  if type(reply) == 'table' and reply.err then
    return {'error', reply.err}
  end
end
if fence ~= token or (owner == '' and holder ~= '') then
  if holder ~= '' then
    redis.call('SET', KEYS[1], token .. ' ' .. holder)
  else
    redis.call('SET', KEYS[1], token)
  end
end
return {'ok', reply}
