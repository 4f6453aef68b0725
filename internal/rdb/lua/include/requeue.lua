--- @include "codes"
--- @include "level"
--- @include "cfg"
--- @include "finalize"
-- requeue_pids puts the takings held (a list of {pid = number, id = task
-- id}) back at the front of queue (of its priority level's list), oldest
-- first. A task whose cancel was
-- asked ends as cancelled; a flow run that ended meanwhile is left as it is;
-- crashed counts a crash on each, once per dead worker: a zombie that took
-- its own requeued task again before it noticed its death is not counted
-- twice (F_CRASHED_ON remembers the last worker counted). Returns requeued,
-- cancelled.
local function requeue_pids(held, queue, cfg, retained, tprefix, crashed)
  -- pids number takings in the order tasks left the queue: push the newest
  -- first so that the oldest ends up at the very front.
  table.sort(held, function(x, y) return x.pid < y.pid end)
  local requeued, cancelled = 0, 0
  for i = #held, 1, -1 do
    local id = held[i].id
    local tkey = tprefix .. id
    local t = redis.pcall('HMGET', tkey, F_CANCEL, F_UNIQUE, F_STATE, F_RUN_STATUS, F_WORKER, F_CRASHED_ON, F_RETENTION, F_PRIORITY, F_KEY)
    if t.err then
      -- Corrupt data: requeue the id; the take buries it with the reason.
      redis.call('LPUSH', queue, id)
      requeued = requeued + 1
    elseif t[4] and t[4] ~= R_RUNNING then
      -- A flow run that ended (cancelled) while this taking ran: keep it.
      redis.call('HDEL', tkey, F_WORKER, F_PID)
    elseif t[1] then
      finalize(tkey, id, t[2], S_CANCELLED, cfg_num(cfg, 'retention', 0), '', retained, t[7], t[9])
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
      redis.call('LPUSH', level_list(queue, t[8]), id)
      requeued = requeued + 1
    end
  end
  return requeued, cancelled
end
