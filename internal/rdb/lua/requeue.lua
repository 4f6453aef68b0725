--- @include "requeue"
-- requeue (fail worker): put every taking that the given workers hold in one
-- queue back at the front of that queue, oldest taking first, and forget the
-- workers' holdings there. Idempotent: a second run finds nothing.
-- KEYS[1]    <ns>:{T}:q:<queue>        (list) waiting ids
-- KEYS[2]    <ns>:{T}:h:<queue>        (set)  workers that may hold takings
-- KEYS[3]    <ns>:{T}:cfg:<queue>      (hash) queue settings
-- KEYS[4]    <ns>:{T}:done:<queue>     (zset) retained ended ids
-- KEYS[5..]  <ns>:{T}:wq:<queue>:<w>   (set)  one per worker, in ARGV order
-- ARGV[1] wake channel   ARGV[2] processing list prefix   ARGV[3] task key prefix
-- ARGV[4] "1" when the workers died (each requeued task counts a crash)
-- ARGV[5..] worker ids, aligned with KEYS[5..]
-- Returns: {requeued, cancelled}. A task whose cancel was asked ends as
-- cancelled instead of being requeued; a flow run that ended meanwhile is left
-- as it is.
local pids = {}
for i = 5, #KEYS do
  for _, pid in ipairs(redis.call('SMEMBERS', KEYS[i])) do
    table.insert(pids, tonumber(pid))
  end
  redis.call('DEL', KEYS[i])
  redis.call('SREM', KEYS[2], ARGV[i])
end
local requeued, cancelled = requeue_pids(pids, KEYS[1], KEYS[3], KEYS[4], ARGV[2], ARGV[3], ARGV[4] == '1')
if requeued > 0 then
  redis.call('PUBLISH', ARGV[1], requeued)
end
return {requeued, cancelled}
