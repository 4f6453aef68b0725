-- child_finish: record the end of a child taking, only if the caller still
-- owns it; record its outcome in its run, and when it is the last pending
-- child, forward the run: all in one step, so the run moves on exactly once.
-- KEYS[1] <ns>:{F}:wq:<child q>:<w>   (set)  pids worker w holds in the queue
-- KEYS[2] <ns>:{F}:p:<pid>            (list) processing list of the taking
-- KEYS[3] <ns>:{F}:t:<child id>       (hash) the child task
-- KEYS[4] <ns>:{F}:s:<child q>        (zset) scheduled ids of the queue
-- KEYS[5] <ns>:{F}:dead:<child q>     (zset) dead ids of the queue
-- KEYS[6] <ns>:{F}:cfg:<child q>      (hash) queue settings
-- KEYS[7] <ns>:{F}:t:<run id>         (hash) the run
-- ARGV[1] pid  ARGV[2] child id  ARGV[3] worker id  ARGV[4] mode done|retry|dead
-- ARGV[5] retry delay ms  ARGV[6] error text  ARGV[7] result
-- ARGV[8] task key prefix
-- ARGV[9..13] queue, wake, scheduled, cancel, index prefixes of the tag
-- The run's next stage and the fan-out policy were stored on the child at
-- fan-out ('pn', 'pf'); the run's retention and indexed fields on the run.
-- Returns: {child outcome, run outcome}: child 0 lost, 1 done, 2 cancelled
-- (its run ended, or it was already counted), 4 retry, 5 dead; run 0
-- unchanged, 1 done, 5 failed, 7 forwarded.
if redis.call('SREM', KEYS[1], ARGV[1]) == 0 then
  return {0, 0}
end
redis.call('DEL', KEYS[2])
local cid = ARGV[2]
local runkey = KEYS[7]
local pfx = prefixes(9)
local runid = redis.call('HGET', KEYS[3], 'pr')
local r = redis.call('HMGET', runkey, 'fs', 'k:' .. cid)
if r[1] ~= 'running' or r[2] ~= 'pending' then
  -- The run ended (cancelled, failed) or this child was already counted.
  redis.call('DEL', KEYS[3])
  return {2, 0}
end
local mode = ARGV[4]
local err = ARGV[6]
if redis.call('HGET', KEYS[3], 'x') then
  mode = 'cancelled'
  err = 'cancelled'
end
if mode == 'retry' then
  redis.call('HINCRBY', KEYS[3], 'n', 1)
  redis.call('HSET', KEYS[3], 's', 'scheduled', 'e', err)
  redis.call('HDEL', KEYS[3], 'w', 'p')
  redis.call('ZADD', KEYS[4], now_ms() + tonumber(ARGV[5]), cid)
  return {4, 0}
end
local child, ok = 2, false
if mode == 'done' then
  child, ok = 1, true
elseif mode == 'dead' then
  child = 5
end
local run = child_ended(runkey, runid, cid, KEYS[3], ok, ARGV[7], err, pfx, ARGV[8])
if child == 5 then
  redis.call('HINCRBY', KEYS[3], 'n', 1)
  bury(KEYS[5], KEYS[6], ARGV[8], cid, 'failed', err, ARGV[3])
else
  redis.call('DEL', KEYS[3])
end
return {child, run}
