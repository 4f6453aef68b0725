-- levels: record that a queue has tasks of priority level ARGV[1], before
-- they are enqueued: its config's 'prio' (the highest level in use, never
-- lowered) tells workers which level lists to take from. When it grows,
-- workers are told at once (a wake-up carrying 0: read the queue's flags).
-- KEYS[1] <ns>:{T}:cfg:<queue>        (hash) queue settings
-- KEYS[2] <ns>:{T}:park:<queue>       (hash) parked workers: deleted, since
--         a task handed at enqueue would pass tasks of higher levels
-- ARGV[1] level (1..9)   ARGV[2] wake channel
-- Returns: the highest level now recorded.
local cur = tonumber(redis.call('HGET', KEYS[1], 'prio')) or 0
local l = tonumber(ARGV[1])
if cur >= l then
  return cur
end
redis.call('HSET', KEYS[1], 'prio', l)
redis.call('DEL', KEYS[2])
redis.call('PUBLISH', ARGV[2], '0')
return l
