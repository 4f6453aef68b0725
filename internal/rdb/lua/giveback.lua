-- giveback: put a taking back at the front of its queue, only if the caller
-- still owns it, and publish a wake-up.
-- KEYS[1] <ns>:{T}:wq:<queue>:<w>     (set)  pids worker w holds in this queue
-- KEYS[2] <ns>:{T}:p:<pid>            (list) processing list of the taking
-- KEYS[3] <ns>:{T}:t:<id>             (hash) the task
-- KEYS[4] <ns>:{T}:q:<queue>          (list) waiting ids
-- ARGV[1] pid   ARGV[2] task id   ARGV[3] wake channel
-- Returns: 0 lost (not the owner: nothing changed), 1 requeued, 2 cancelled
-- (a cancel was asked while it ran, so it is not requeued).
if redis.call('SREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('DEL', KEYS[2])
if redis.call('HGET', KEYS[3], 'x') then
  redis.call('DEL', KEYS[3])
  return 2
end
redis.call('HSET', KEYS[3], 's', 'queued')
redis.call('HDEL', KEYS[3], 'w', 'p')
redis.call('LPUSH', KEYS[4], ARGV[2])
redis.call('PUBLISH', ARGV[3], 1)
return 1
