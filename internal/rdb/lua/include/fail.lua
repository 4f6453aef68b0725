--- @include "codes"
--- @include "time"
--- @include "bury"
--- @include "history"
-- fail_attempt records a failed attempt of task id, the one place the retry
-- and bury block is written: its failure count grows and the attempt goes
-- into its history (see history.lua); ask 'retry' schedules it at Redis
-- time + delay ms, anything else buries it with err; ask 'later' (rate
-- limited) schedules it the same way without counting a failure (nor
-- recording one). Returns OUT_RETRY or OUT_DEAD.
local function fail_attempt(q, tkey, id, ask, delay, err, worker)
  local n
  if ask ~= 'later' then
    n = redis.call('HINCRBY', tkey, F_FAILURES, 1)
  end
  if ask == 'retry' or ask == 'later' then
    local t = redis.call('HMGET', tkey, F_DEADLINE, F_STARTED, F_HISTORY_SEQ)
    if n then
      redis.call('HSET', tkey, F_STATE, S_SCHEDULED, F_ERROR, err, history_pairs(t[3], n, t[2], 'retry', worker, err))
    else
      redis.call('HSET', tkey, F_STATE, S_SCHEDULED, F_ERROR, err)
    end
    redis.call('HDEL', tkey, F_WORKER, F_PID)
    -- A retry due past the task's deadline is due at it: the take then
    -- ends it as expired, rather than after the whole backoff.
    local due = now_ms() + tonumber(delay)
    local deadline = tonumber(t[1])
    if deadline and deadline < due then
      due = deadline
    end
    redis.call('ZADD', q.sched_key, due, id)
    return OUT_RETRY
  end
  bury(q.dead_key, q.cfg_key, q.tprefix, id, 'failed', err, worker, n)
  return OUT_DEAD
end
