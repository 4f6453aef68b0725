--- @include "requeue"
-- requeue (fail worker): put the takings that the given workers hold in one
-- queue back at the front of that queue, oldest taking first, and forget the
-- workers' holdings there. At most ARGV[4] takings per run, so that no run
-- holds Redis long: the caller runs it again while it reports more. The
-- order is kept within a run; a worker that holds more than ARGV[4] takings
-- in one queue has them requeued in several runs, each run's in front of the
-- last's. Idempotent: a run after the last finds nothing.
-- KEYS[1]    <ns>:{T}:q:<queue>        (list) waiting ids
-- KEYS[2]    <ns>:{T}:h:<queue>        (set)  workers that may hold takings
-- KEYS[3]    <ns>:{T}:cfg:<queue>      (hash) queue settings
-- KEYS[4]    <ns>:{T}:done:<queue>     (zset) retained ended ids
-- KEYS[5..n-1] <ns>:{T}:wq:<queue>:<w> (hash) pid -> task id, one per worker
-- KEYS[n]    <ns>:{T}:park:<queue>     (hash) parked workers: the workers'
--            fields are removed, so that nothing is handed to them after
-- ARGV[1] wake channel   ARGV[2] task key prefix
-- ARGV[3] "1" when the workers died (each requeued task counts a crash)
-- ARGV[4] most takings to requeue in this run (>= 1)
-- ARGV[5..] worker ids, aligned with KEYS[5..n-1]
-- Returns: {requeued, more, cancelled...}; more is 1 when takings are left
-- for another run. A task whose cancel was asked ends as cancelled instead
-- of being requeued (cancelled holds id, pid and worker of each, flat); a
-- flow run that ended meanwhile is left as it is.
local limit = tonumber(ARGV[4])
local held = {}
local more = 0
for i = 5, #ARGV, 1000 do
  redis.call('HDEL', KEYS[#KEYS], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
for i = 5, #KEYS - 1 do
  local room = limit - #held
  if room <= 0 then
    more = 1
    break
  end
  local kv = redis.call('HRANDFIELD', KEYS[i], room, 'WITHVALUES')
  local fields = {}
  for j = 1, #kv, 2 do
    held[#held + 1] = {pid = tonumber(kv[j]), id = kv[j + 1], w = ARGV[i]}
    fields[#fields + 1] = kv[j]
  end
  if #fields > 0 then
    redis.call('HDEL', KEYS[i], unpack(fields))
  end
  if redis.call('EXISTS', KEYS[i]) == 0 then
    redis.call('SREM', KEYS[2], ARGV[i])
  else
    more = 1
  end
end
local requeued, cancelled, woke = requeue_pids(held, KEYS[1], KEYS[3], KEYS[4], ARGV[2], ARGV[3] == '1')
if requeued + woke > 0 then
  redis.call('PUBLISH', ARGV[1], requeued + woke)
end
local out = {requeued, more}
for _, v in ipairs(cancelled) do
  out[#out + 1] = v
end
return out
