-- cfg: queue settings written by the workers serving the queue. Defaults
-- match the Go defaults of package worqr and apply only where no worker wrote
-- the queue's config hash yet.
local DEFAULT_DEAD_MAX = 10000
local DEFAULT_DEAD_AGE = 90 * 24 * 3600 * 1000

local function cfg_num(cfgkey, field, default)
  local v = tonumber(redis.call('HGET', cfgkey, field))
  return v or default
end
