--- @include "codes"
--- @include "time"
--- @include "cfg"
--- @include "finalize"
-- trim_dead enforces a dead set's caps (count, then age), at most 1000
-- deletions of each kind per call.
local function trim_dead(deadkey, cfgkey, tprefix)
  local max = cfg_num(cfgkey, 'dead_max', DEFAULT_DEAD_MAX)
  local age = cfg_num(cfgkey, 'dead_age', DEFAULT_DEAD_AGE)
  local excess = redis.call('ZCARD', deadkey) - max
  if excess > 0 then
    local old = redis.call('ZRANGE', deadkey, 0, math.min(excess, 1000) - 1)
    for _, id in ipairs(old) do
      redis.call('DEL', tprefix .. id)
    end
    redis.call('ZREM', deadkey, unpack(old))
  end
  local expired = redis.call('ZRANGEBYSCORE', deadkey, '-inf', now_ms() - age, 'LIMIT', 0, 1000)
  if #expired > 0 then
    for _, id in ipairs(expired) do
      redis.call('DEL', tprefix .. id)
    end
    redis.call('ZREM', deadkey, unpack(expired))
  end
end

-- bury moves task id into the dead set with a reason, keeping its hash (no
-- expiry, no taking fields), releases its unique key and trims the set.
local function bury(deadkey, cfgkey, tprefix, id, reason, err, worker)
  local tkey = tprefix .. id
  release_unique(redis.call('HGET', tkey, F_UNIQUE), id)
  redis.call('HSET', tkey, F_STATE, S_DEAD, F_DEAD_REASON, reason, F_DEAD_AT, now_ms())
  if err and err ~= '' then
    redis.call('HSET', tkey, F_ERROR, err)
  end
  if worker and worker ~= '' then
    redis.call('HSET', tkey, F_DEAD_WORKER, worker)
  end
  redis.call('HDEL', tkey, F_WORKER, F_PID, F_CANCEL)
  redis.call('PERSIST', tkey)
  redis.call('ZADD', deadkey, now_ms(), id)
  trim_dead(deadkey, cfgkey, tprefix)
end
