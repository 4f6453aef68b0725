--- @include "codes"
--- @include "time"
--- @include "key"
-- release_unique deletes unique key u if it still names task id.
local function release_unique(u, id)
  if u and u ~= '' then
    local holder = redis.pcall('GET', u)
    if holder == id then
      redis.call('DEL', u)
    end
  end
end

-- RETAIN_TRIM is how many expired entries of retained sets one script call
-- trims at most, so that no call holds Redis for more than a few
-- milliseconds: entries expire in bulk (the tasks that ended in a burst
-- expire together, and the next ending finds them all). The rest go in the
-- next calls, RETAIN_TRIM each (an add trims more than it adds, so the set
-- shrinks back); meanwhile an expired id stays listed with no hash, as it
-- does between any two adds.
local RETAIN_TRIM = 1000

-- RESULT_RETENTION is how long (ms) a done task that carries a result is
-- kept when neither the task nor its queue names a retention: 24 h, so
-- that a Wait or a read of the task finds the result its handler set. The
-- result is bounded as a payload is (MaxPayloadBytes).
local RESULT_RETENTION = 86400000

-- finalize ends a task (done, cancelled or expired): its unique key is
-- released and its hash kept for retention ms, or deleted when retention is
-- 0. task_ms, when a number, is the task's own retention (F_RETENTION, which
-- the caller read with the rest of the hash) and wins over the queue's. A
-- done task with a result and no retention of either is kept for
-- RESULT_RETENTION. A
-- kept task is listed in the queue's retained set retkey, scored by the
-- time it expires (entries past it are trimmed here, at most RETAIN_TRIM
-- per script call, oldest first). The set lives as long as its latest
-- entry: the queue's retention from its last add, or,
-- after a task's own retention, at least that. okey is the task's key on an
-- ordered queue (nil else): the key's next task moves up.
local function finalize(tkey, id, u, state, retention, result, retkey, task_ms, okey)
  release_unique(u, id)
  key_ended(tkey, id, okey, retkey, 'done:')
  task_ms = tonumber(task_ms)
  if task_ms then
    retention = task_ms
  end
  if retention == 0 and state == S_DONE and result and result ~= '' then
    retention = RESULT_RETENTION
  end
  if retention > 0 then
    local now = now_ms()
    redis.call('HSET', tkey, F_STATE, state, F_FINISHED_AT, now)
    if result and result ~= '' then
      redis.call('HSET', tkey, F_RESULT, result)
    end
    redis.call('HDEL', tkey, F_WORKER, F_PID)
    redis.call('PEXPIRE', tkey, retention)
    if retkey then
      redis.call('ZADD', retkey, now + retention, id)
      -- What this run may still trim (now_ms made the run's scratch).
      local left = _call.trims or RETAIN_TRIM
      if left > 0 then
        -- (The entries past their time are the set's first: it is sorted
        -- by expiry, and the one just added expires after now.)
        local old = redis.call('ZRANGEBYSCORE', retkey, '-inf', now, 'LIMIT', 0, left)
        if #old > 0 then
          redis.call('ZREMRANGEBYRANK', retkey, 0, #old - 1)
        end
        _call.trims = left - #old
      end
      if not task_ms or redis.call('PTTL', retkey) < retention then
        redis.call('PEXPIRE', retkey, retention)
      end
    end
  else
    redis.call('DEL', tkey)
  end
end
