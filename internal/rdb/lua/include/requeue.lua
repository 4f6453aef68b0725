--- @include "codes"
--- @include "cfg"
--- @include "finalize"
-- requeue_pids puts the takings pids (numbers) back at the front of queue,
-- oldest first, and deletes their processing lists. A task whose cancel was
-- asked ends as cancelled; a flow run that ended meanwhile is left as it is;
-- crashed counts a crash on each, once per dead worker: a zombie that took
-- its own requeued task again before it noticed its death is not counted
-- twice (F_CRASHED_ON remembers the last worker counted). Returns requeued,
-- cancelled.
local function requeue_pids(pids, queue, cfg, retained, pprefix, tprefix, crashed)
  -- pids number takings in the order tasks left the queue: push the newest
  -- first so that the oldest ends up at the very front.
  table.sort(pids)
  local requeued, cancelled = 0, 0
  for i = #pids, 1, -1 do
    local pkey = pprefix .. pids[i]
    local id = redis.call('LINDEX', pkey, 0)
    redis.call('DEL', pkey)
    if id then
      local tkey = tprefix .. id
      local t = redis.pcall('HMGET', tkey, F_CANCEL, F_UNIQUE, F_STATE, F_RUN_STATUS, F_WORKER, F_CRASHED_ON)
      if t.err then
        -- Corrupt data: requeue the id; the take buries it with the reason.
        redis.call('LPUSH', queue, id)
        requeued = requeued + 1
      elseif t[4] and t[4] ~= R_RUNNING then
        -- A flow run that ended (cancelled) while this taking ran: keep it.
        redis.call('HDEL', tkey, F_WORKER, F_PID)
      elseif t[1] then
        finalize(tkey, id, t[2], S_CANCELLED, cfg_num(cfg, 'retention', 0), '', retained)
        cancelled = cancelled + 1
      elseif t[3] == S_ACTIVE then
        if crashed and (not t[5] or t[5] ~= t[6]) then
          redis.call('HINCRBY', tkey, F_CRASHES, 1)
          if t[5] then
            redis.call('HSET', tkey, F_CRASHED_ON, t[5])
          end
        end
        redis.call('HSET', tkey, F_STATE, S_QUEUED)
        redis.call('HDEL', tkey, F_WORKER, F_PID)
        redis.call('LPUSH', queue, id)
        requeued = requeued + 1
      end
    end
  end
  return requeued, cancelled
end
