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
redis.call('HSET', KEYS[2], F_PROGRESS, ARGV[2])
return 1
