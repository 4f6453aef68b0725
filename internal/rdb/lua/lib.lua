-- lib: functions shared by the scripts, prepended to each one when it is
-- loaded (Lua has no includes). Defaults match the Go defaults of package worqr
-- and apply only where no worker wrote the queue's config hash yet.
local DEFAULT_DEAD_MAX = 10000
local DEFAULT_DEAD_AGE = 90 * 24 * 3600 * 1000

local _now
-- now_ms: Redis server time in milliseconds, read once per script run.
local function now_ms()
  if not _now then
    local t = redis.call('TIME')
    _now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return _now
end

local function cfg_num(cfgkey, field, default)
  local v = tonumber(redis.call('HGET', cfgkey, field))
  return v or default
end

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
-- its hash kept for retention ms, or deleted when retention is 0.
local function finalize(tkey, id, u, state, retention, result)
  release_unique(u, id)
  if retention > 0 then
    redis.call('HSET', tkey, 's', state, 'ft', now_ms())
    if result and result ~= '' then
      redis.call('HSET', tkey, 'r', result)
    end
    redis.call('HDEL', tkey, 'w', 'p')
    redis.call('PEXPIRE', tkey, retention)
  else
    redis.call('DEL', tkey)
  end
end

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
  release_unique(redis.call('HGET', tkey, 'u'), id)
  redis.call('HSET', tkey, 's', 'dead', 'dr', reason, 'dt', now_ms())
  if err and err ~= '' then
    redis.call('HSET', tkey, 'e', err)
  end
  if worker and worker ~= '' then
    redis.call('HSET', tkey, 'dw', worker)
  end
  redis.call('HDEL', tkey, 'w', 'p', 'x')
  redis.call('PERSIST', tkey)
  redis.call('ZADD', deadkey, now_ms(), id)
  trim_dead(deadkey, cfgkey, tprefix)
end

