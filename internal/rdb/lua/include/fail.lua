--- @include "codes"
--- @include "time"
--- @include "bury"
-- fail_attempt records a failed attempt of task id, the one place the retry
-- and bury block is written: its failure count grows; ask 'retry' schedules
-- it at Redis time + delay ms, anything else buries it with err; ask 'later'
-- (rate limited) schedules it the same way without counting a failure.
-- Returns OUT_RETRY or OUT_DEAD.
local function fail_attempt(q, tkey, id, ask, delay, err, worker)
  if ask ~= 'later' then
    redis.call('HINCRBY', tkey, F_FAILURES, 1)
  end
  if ask == 'retry' or ask == 'later' then
    redis.call('HSET', tkey, F_STATE, S_SCHEDULED, F_ERROR, err)
    redis.call('HDEL', tkey, F_WORKER, F_PID)
    -- A retry due past the task's deadline is due at it: the take then
    -- ends it as expired, rather than after the whole backoff.
    local due = now_ms() + tonumber(delay)
    local deadline = tonumber(redis.call('HGET', tkey, F_DEADLINE))
    if deadline and deadline < due then
      due = deadline
    end
    redis.call('ZADD', q.sched_key, due, id)
    return OUT_RETRY
  end
  bury(q.dead_key, q.cfg_key, q.tprefix, id, 'failed', err, worker)
  return OUT_DEAD
end
