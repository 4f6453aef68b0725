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

-- finalize ends a task (done, cancelled or expired): its unique key is
-- released and its hash kept for retention ms, or deleted when retention is
-- 0. task_ms, when a number, is the task's own retention (F_RETENTION, which
-- the caller read with the rest of the hash) and wins over the queue's. A
-- kept task is listed in the queue's retained set retkey, scored by the
-- time it expires (entries past it are trimmed here). The set lives as
-- long as its latest entry: the queue's retention from its last add, or,
-- after a task's own retention, at least that. okey is the task's key on an
-- ordered queue (nil else): the key's next task moves up.
local function finalize(tkey, id, u, state, retention, result, retkey, task_ms, okey)
  release_unique(u, id)
  key_ended(tkey, id, okey, retkey, 'done:')
  task_ms = tonumber(task_ms)
  if task_ms then
    retention = task_ms
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
      redis.call('ZREMRANGEBYSCORE', retkey, '-inf', now)
      if not task_ms or redis.call('PTTL', retkey) < retention then
        redis.call('PEXPIRE', retkey, retention)
      end
    end
  else
    redis.call('DEL', tkey)
  end
end
