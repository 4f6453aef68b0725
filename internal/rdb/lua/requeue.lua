-- requeue (fail worker): put every taking that the given workers hold in one
-- queue back at the front of that queue, oldest taking first, and forget the
-- workers' holdings there. Idempotent: a second run finds nothing.
-- KEYS[1]    <ns>:{T}:q:<queue>        (list) waiting ids
-- KEYS[2]    <ns>:{T}:h:<queue>        (set)  workers that may hold takings
-- KEYS[3]    <ns>:{T}:cfg:<queue>      (hash) queue settings
-- KEYS[4..]  <ns>:{T}:wq:<queue>:<w>   (set)  one per worker, in ARGV order
-- ARGV[1] wake channel   ARGV[2] processing list prefix   ARGV[3] task key prefix
-- ARGV[4] "1" when the workers died (each requeued task counts a crash)
-- ARGV[5..] worker ids, aligned with KEYS[4..]
-- Returns: {requeued, cancelled}. A task whose cancel was asked ends as
-- cancelled instead of being requeued; a flow run that ended meanwhile is left
-- as it is.
local pids = {}
for i = 4, #KEYS do
  for _, pid in ipairs(redis.call('SMEMBERS', KEYS[i])) do
    table.insert(pids, tonumber(pid))
  end
  redis.call('DEL', KEYS[i])
  redis.call('SREM', KEYS[2], ARGV[i + 1])
end
-- pids number takings in the order tasks left the queue: push the newest
-- first so that the oldest ends up at the very front.
table.sort(pids)
local requeued, cancelled = 0, 0
for i = #pids, 1, -1 do
  local pkey = ARGV[2] .. pids[i]
  local id = redis.call('LINDEX', pkey, 0)
  redis.call('DEL', pkey)
  if id then
    local tkey = ARGV[3] .. id
    local t = redis.pcall('HMGET', tkey, 'x', 'u', 's', 'fs')
    if t.err then
      -- Corrupt data: requeue the id; the take buries it with the reason.
      redis.call('LPUSH', KEYS[1], id)
      requeued = requeued + 1
    elseif t[4] and t[4] ~= 'running' then
      -- A flow run that ended (cancelled) while this taking ran: keep it.
      redis.call('HDEL', tkey, 'w', 'p')
    elseif t[1] then
      finalize(tkey, id, t[2], 'cancelled', cfg_num(KEYS[3], 'retention', 0), '')
      cancelled = cancelled + 1
    elseif t[3] == 'active' then
      if ARGV[4] == '1' then
        redis.call('HINCRBY', tkey, 'c', 1)
      end
      redis.call('HSET', tkey, 's', 'queued')
      redis.call('HDEL', tkey, 'w', 'p')
      redis.call('LPUSH', KEYS[1], id)
      requeued = requeued + 1
    end
  end
end
if requeued > 0 then
  redis.call('PUBLISH', ARGV[1], requeued)
end
return {requeued, cancelled}
