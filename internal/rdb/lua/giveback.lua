-- giveback: put a taking back at the front of its queue, only if the caller
-- still owns it, and publish a wake-up.
-- KEYS[1] <ns>:{T}:wq:<queue>:<w>     (set)  pids worker w holds in this queue
-- KEYS[2] <ns>:{T}:p:<pid>            (list) processing list of the taking
-- KEYS[3] <ns>:{T}:t:<id>             (hash) the task
-- KEYS[4] <ns>:{T}:q:<queue>          (list) waiting ids
-- KEYS[5] <ns>:{T}:cfg:<queue>        (hash) queue settings
-- ARGV[1] pid   ARGV[2] task id   ARGV[3] wake channel
-- Returns: 0 lost (not the owner: nothing changed), 3 requeued, 2 cancelled
-- (a cancel was asked while it ran, so it is not requeued).
if redis.call('SREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('DEL', KEYS[2])
local t = redis.pcall('HMGET', KEYS[3], 'x', 'u', 'fs')
if t.err then
  -- Corrupt task data: put the id back; the take buries it with the reason.
  redis.call('LPUSH', KEYS[4], ARGV[2])
  redis.call('PUBLISH', ARGV[3], 1)
  return 3
end
if t[3] and t[3] ~= 'running' then
  -- A flow run that ended (cancelled) while this taking ran: keep it as is.
  redis.call('HDEL', KEYS[3], 'w', 'p')
  return 2
end
if t[1] then
  finalize(KEYS[3], ARGV[2], t[2], 'cancelled', cfg_num(KEYS[5], 'retention', 0), '')
  return 2
end
redis.call('HSET', KEYS[3], 's', 'queued')
redis.call('HDEL', KEYS[3], 'w', 'p')
redis.call('LPUSH', KEYS[4], ARGV[2])
redis.call('PUBLISH', ARGV[3], 1)
return 3
