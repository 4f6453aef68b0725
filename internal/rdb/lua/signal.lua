--- @include "codes"
--- @include "flow"
-- signal: deliver signal NAME to flow run id (Client.Signal). A run that
-- sleeps awaiting it (F_AWAIT, scheduled at its stage) gets its payload as
-- state field NAME and moves to the back of its stage's list now, in this
-- one step (the mover, or a RunNow, that moved it first leaves it to be
-- kept instead); otherwise it is kept for the next stage end that awaits
-- it (see flow.lua, "Signals").
-- KEYS[1] <ns>:{F}:t:<run id>         (hash) the run
-- ARGV[1] run id   ARGV[2] name   ARGV[3] payload
-- ARGV[4] signal id ("": none)   ARGV[5] how long a kept signal is kept, ms
-- ARGV[6..10] queue, wake, scheduled, cancel, index prefixes of the tag
-- Returns: 1 delivered (the run moves on), 2 kept, 0 the run is not
-- running (unknown or ended), -1 signal id taken already (nothing done),
-- -2 the run keeps FLOW.KEPT signals of other names, none expired
-- (nothing done).
local t = redis.call('HMGET', KEYS[1], F_RUN_STATUS, F_STAGE, F_STATE, F_AWAIT)
if t[1] ~= R_RUNNING then
  return 0
end
local id, name, sig = ARGV[1], ARGV[2], ARGV[4]
if sig ~= '' and redis.call('HEXISTS', KEYS[1], 'sd:' .. sig) == 1 then
  return -1
end
local pfx = prefixes(ARGV, 6)
local out
if t[4] == name and t[3] == S_SCHEDULED and redis.call('ZREM', pfx.sched .. t[2], id) == 1 then
  redis.call('HSET', KEYS[1], 'f:' .. name, ARGV[3], F_STATE, S_QUEUED)
  redis.call('HDEL', KEYS[1], F_AWAIT)
  redis.call('RPUSH', pfx.queue .. t[2], id)
  redis.call('PUBLISH', pfx.wake .. t[2], 1)
  out = 1
else
  local field = 'sp:' .. name
  if redis.call('HEXISTS', KEYS[1], field) == 0 then
    local names = FLOW.kept(KEYS[1])
    if #names >= FLOW.KEPT then
      names = FLOW.prune(KEYS[1], names)
      if #names >= FLOW.KEPT then
        return -2
      end
    end
    names[#names + 1] = name
    FLOW.store(KEYS[1], names)
  end
  redis.call('HSET', KEYS[1], field, (now_ms() + tonumber(ARGV[5])) .. ' ' .. ARGV[3])
  out = 2
end
if sig ~= '' then
  local slot = 'sr:' .. (redis.call('HINCRBY', KEYS[1], 'sdq', 1) % FLOW.IDS)
  local old = redis.call('HGET', KEYS[1], slot)
  if old then
    redis.call('HDEL', KEYS[1], 'sd:' .. old)
  end
  redis.call('HSET', KEYS[1], 'sd:' .. sig, out, slot, sig)
end
return out
