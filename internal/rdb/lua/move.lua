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
-- ARGV[4] (optional) the most dead entries of each kind the trim deletes
--         (TRIM_DEAD when absent): the mover sends many calls in one round
--         trip, which Redis runs back to back, each with its share.
-- Returns: the number of tasks moved; with ARGV[4], {moved, more}: more is
-- 1 when the call moved its batch or the trim made its most deletions of a
-- kind (more may be due or old), else 0.
local limit = tonumber(ARGV[4])
local trimmed = trim_dead(KEYS[3], KEYS[4], ARGV[2], 0, limit)
local batch = tonumber(ARGV[1])
local function reply(n)
  if not limit then
    return n
  end
  return {n, (trimmed or n == batch) and 1 or 0}
end
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms(), 'LIMIT', 0, batch)
if #ids == 0 then
  return reply(0)
end
local n = #ids
redis.call('ZREM', KEYS[1], unpack(ids))
for _, id in ipairs(ids) do
  -- A key of the wrong type must not abort the batch: the take buries it.
  redis.pcall('HSET', ARGV[2] .. id, F_STATE, S_QUEUED)
end
push_back(KEYS[2], KEYS[4], ARGV[2], ids)
redis.call('PUBLISH', ARGV[3], n)
return reply(n)
