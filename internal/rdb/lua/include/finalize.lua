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

-- finalize ends a task (done or cancelled): its unique key is released and
-- its hash kept for retention ms, or deleted when retention is 0. A kept
-- task is listed in the queue's retained set retkey (scored by finish time;
-- entries older than the retention are trimmed here). okey is the task's
-- key on an ordered queue (nil else): the key's next task moves up.
local function finalize(tkey, id, u, state, retention, result, retkey, okey)
  release_unique(u, id)
  key_ended(tkey, id, okey, retkey, 'done:')
  if retention > 0 then
    local now = now_ms()
    redis.call('HSET', tkey, F_STATE, state, F_FINISHED_AT, now)
    if result and result ~= '' then
      redis.call('HSET', tkey, F_RESULT, result)
    end
    redis.call('HDEL', tkey, F_WORKER, F_PID)
    redis.call('PEXPIRE', tkey, retention)
    if retkey then
      redis.call('ZADD', retkey, now, id)
      redis.call('ZREMRANGEBYSCORE', retkey, '-inf', now - retention)
      redis.call('PEXPIRE', retkey, retention)
    end
  else
    redis.call('DEL', tkey)
  end
end
