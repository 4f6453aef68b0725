-- finish: record the end of a taking, only if the caller still owns it.
-- KEYS[1] <ns>:{T}:wq:<queue>:<w>     (set)  pids worker w holds in this queue
-- KEYS[2] <ns>:{T}:p:<pid>            (list) processing list of the taking
-- KEYS[3] <ns>:{T}:t:<id>             (hash) the task
-- KEYS[4] <ns>:{T}:s:<queue>          (zset) scheduled ids by due time
-- KEYS[5] <ns>:{T}:dead:<queue>       (zset) dead ids by time of death
-- KEYS[6] <ns>:{T}:cfg:<queue>        (hash) queue settings
-- ARGV[1] pid   ARGV[2] task id   ARGV[3] worker id
-- ARGV[4] mode: "done" | "retry" | "dead"
-- ARGV[5] retry delay ms (mode retry)   ARGV[6] error text (retry, dead)
-- ARGV[7] retention ms of ended tasks (0 = delete at once)
-- ARGV[8] result (mode done)   ARGV[9] task key prefix
-- Returns: 0 lost (not the owner: nothing changed), 1 done, 2 cancelled (a
-- cancel was asked while it ran; it wins over every mode), 4 retry
-- scheduled, 5 dead.
if redis.call('SREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('DEL', KEYS[2])
local t = redis.call('HMGET', KEYS[3], 'x', 'u')
local retention = tonumber(ARGV[7])
if t[1] then
  finalize(KEYS[3], ARGV[2], t[2], 'cancelled', retention, '')
  return 2
end
local mode = ARGV[4]
if mode == 'done' then
  finalize(KEYS[3], ARGV[2], t[2], 'done', retention, ARGV[8])
  return 1
end
redis.call('HINCRBY', KEYS[3], 'n', 1)
if mode == 'retry' then
  redis.call('HSET', KEYS[3], 's', 'scheduled', 'e', ARGV[6])
  redis.call('HDEL', KEYS[3], 'w', 'p')
  redis.call('ZADD', KEYS[4], now_ms() + tonumber(ARGV[5]), ARGV[2])
  return 4
end
bury(KEYS[5], KEYS[6], ARGV[9], ARGV[2], 'failed', ARGV[6], ARGV[3])
return 5
