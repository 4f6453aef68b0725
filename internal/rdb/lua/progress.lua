--- @include "codes"
-- progress: record what the owner of a taking reports about its work, only
-- while it owns it (a zombie's report changes nothing).
-- KEYS[1] <ns>:{T}:wq:<queue>:<w>     (hash) pid -> task id the worker holds
-- KEYS[2] <ns>:{T}:t:<id>             (hash) the task
-- ARGV[1] pid   ARGV[2] the report   ARGV[3] task id
-- Returns: 1, or 0 when the caller does not own the taking.
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[3] then
  return 0
end
-- A flow child fanned out by a version before 'pe' keeps its fan-out's
-- number in F_PROGRESS (see child_of in flow.lua): it moves to 'pe' before
-- the report overwrites it, so that the child can still rejoin its run.
local c = redis.call('HMGET', KEYS[2], F_PARENT, 'pe', F_PROGRESS)
if c[1] and not c[2] and c[3] then
  redis.call('HSET', KEYS[2], 'pe', c[3], F_PROGRESS, ARGV[2])
  return 1
end
redis.call('HSET', KEYS[2], F_PROGRESS, ARGV[2])
return 1
