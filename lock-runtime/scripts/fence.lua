-- A resource's fence (lock_runtime::fence::redis): a claim or a check of the fence, and one
-- command on the resource's data key, as one step.
--
-- KEYS[1]: the fence key; KEYS[2]: the data key (the same Cluster slot).
-- ARGV[1]: the holder's fencing token, in decimal without leading zeros; ARGV[2]: 'claim' (raise
-- the fence to the token, refused if it is higher) or 'check' (refused unless the fence is the
-- token); ARGV[3]: the command's name, '' for none; ARGV[4..]: its arguments after the data key.
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
local token = ARGV[1]
local fence = redis.call('GET', KEYS[1])
if fence and above(fence, token) then
  return {'stale', fence}
end
if ARGV[2] == 'check' and fence ~= token then
  return {'unclaimed', fence or ''}
end
local reply = false
if ARGV[3] ~= '' then
  reply = redis.pcall(ARGV[3], KEYS[2], unpack(ARGV, 4))
  if type(reply) == 'table' and reply.err then
    return {'error', reply.err}
  end
end
if fence ~= token then
  redis.call('SET', KEYS[1], token)
end
return {'ok', reply}
