--- @include "codes"
--- @include "time"
--- @include "bury"
--- @include "pushback"
-- move: push up to ARGV[1] scheduled tasks that are due (by Redis time) to the
-- back of their queue (of their priority level's list when the queue has
-- levels: its config's 'prio'), publish a wake-up, and trim the dead set by age.
-- Atomic, so many peers moving at once move each task exactly once.
-- KEYS[1] <ns>:{T}:s:<queue>          (zset) scheduled ids by due time
-- KEYS[2] <ns>:{T}:q:<queue>          (list) waiting ids
-- KEYS[3] <ns>:{T}:dead:<queue>       (zset) dead ids
-- KEYS[4] <ns>:{T}:cfg:<queue>        (hash) queue settings
-- ARGV[1] batch size   ARGV[2] task key prefix   ARGV[3] wake channel
-- Returns: the number of tasks moved.
trim_dead(KEYS[3], KEYS[4], ARGV[2])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms(), 'LIMIT', 0, tonumber(ARGV[1]))
if #ids == 0 then
  return 0
end
local n = #ids
redis.call('ZREM', KEYS[1], unpack(ids))
for _, id in ipairs(ids) do
  -- A key of the wrong type must not abort the batch: the take buries it.
  redis.pcall('HSET', ARGV[2] .. id, F_STATE, S_QUEUED)
end
push_back(KEYS[2], KEYS[4], ARGV[2], ids)
redis.call('PUBLISH', ARGV[3], n)
return n
