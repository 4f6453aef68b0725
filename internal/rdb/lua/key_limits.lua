--- @include "fair"
-- key_limits: store (or, with an empty policy, remove) the policy of one
-- key of a fair queue, and keep the count of the queue's keys whose own
-- policy limits them (a running limit or a rate) in its config hash
-- ('klim'), so that a worker learns from the flags it reads anyway
-- whether any key of the queue is limited (it reads ahead only when none
-- is: a task taken ahead counts as running and as a start before its
-- handler starts). Announced on the queue's wake channel with "0" when the
-- count turns zero or not: the workers read the flags again.
-- KEYS[1] <ns>:{T}:fs:<queue>         (hash) the keys' states and policies
-- KEYS[2] <ns>:{T}:cfg:<queue>        (hash) the queue's settings
-- ARGV[1] the key; ARGV[2] its policy as stored ('' : none, the queue's
--         applies); ARGV[3] the queue's wake channel
-- Returns the count after the change.
local f = 'p:' .. ARGV[1]
local function limits(p)
  local x = FAIR.policy(p, nil)
  return x ~= nil and (x.lim > 0 or (x.rate > 0 and x.period > 0))
end
local was = limits(redis.call('HGET', KEYS[1], f))
local now = ARGV[2] ~= '' and limits(ARGV[2])
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], f)
else
  redis.call('HSET', KEYS[1], f, ARGV[2])
end
local n = math.max(tonumber(redis.call('HGET', KEYS[2], 'klim')) or 0, 0)
if was == now then
  return n
end
local m = math.max(n + (now and 1 or -1), 0)
if m > 0 then
  redis.call('HSET', KEYS[2], 'klim', m)
else
  redis.call('HDEL', KEYS[2], 'klim')
end
if (n > 0) ~= (m > 0) then
  redis.call('PUBLISH', ARGV[3], '0')
end
return m
