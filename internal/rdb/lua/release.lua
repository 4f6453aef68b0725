--- @include "requeue"
-- release: put back at the front of the queue the takings a live worker holds
-- in it but does not know about (a take whose reply was lost on the way), so
-- that no taking stays held by a worker that will never finish it. Takings
-- in ARGV[5..] (the ones the worker runs) are kept.
-- KEYS[1] <ns>:{T}:q:<queue>          (list) waiting ids
-- KEYS[2] <ns>:{T}:wq:<queue>:<w>     (set)  pids worker w holds in the queue
-- KEYS[3] <ns>:{T}:cfg:<queue>        (hash) queue settings
-- KEYS[4] <ns>:{T}:done:<queue>       (zset) retained ended ids
-- ARGV[1] wake channel   ARGV[2] processing list prefix   ARGV[3] task key prefix
-- ARGV[4] unused   ARGV[5..] pids the worker knows it holds
-- Returns: {requeued, cancelled}. Idempotent.
local known = {}
for i = 5, #ARGV do
  known[ARGV[i]] = true
end
local pids = {}
for _, pid in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if not known[pid] then
    redis.call('SREM', KEYS[2], pid)
    table.insert(pids, tonumber(pid))
  end
end
local requeued, cancelled = requeue_pids(pids, KEYS[1], KEYS[3], KEYS[4], ARGV[2], ARGV[3], false)
if requeued > 0 then
  redis.call('PUBLISH', ARGV[1], requeued)
end
return {requeued, cancelled}
