--- @include "codes"
--- @include "flow"
-- run_cancel: end a running flow run as cancelled: its waiting or scheduled
-- stage task is taken out, a running one is told to stop, and so are its
-- pending children; later finishes of any of them change nothing.
-- KEYS[1] <ns>:{F}:t:<run id>         (hash) the run
-- ARGV[1] run id   ARGV[2] task key prefix   ARGV[3] run retention ms
-- ("": the run's own, stored by flow_start, with its indexed properties)
-- ARGV[4..8] queue, wake, scheduled, cancel, index prefixes of the tag
-- ARGV[9] n indexed properties, then the property names
-- Returns: 0 not running (unknown or ended); else {1, stage, queue, id,
-- ...}: cancelled; stage is the queue of the run's stage task when it was
-- taken out of where it waited ("" otherwise: it ran, and its end counts
-- its cancel, or it waits marked, or the run was fanned out), then the
-- children taken out of where they waited, as queue, id pairs.
local t = redis.call('HMGET', KEYS[1], F_RUN_STATUS, F_STAGE, F_STATE)
if t[1] ~= R_RUNNING then
  return 0
end
local pfx = prefixes(ARGV, 4)
local left -- the run stays in its stage's list, marked (too deep to take out)
local out = {1, ''}
if t[3] == S_CHILDREN then
  for _, v in ipairs(cancel_children(KEYS[1], pfx, ARGV[2])) do
    out[#out + 1] = v
  end
else
  local _, marked, found = stop_task(pfx, KEYS[1], ARGV[1], t[2], {left = STOP_SCAN})
  left = marked
  if found then
    out[2] = t[2]
  end
end
if ARGV[3] == '' or redis.call('HEXISTS', KEYS[1], F_RUN_INDEXED) == 1 then
  -- (The run's own settings win over the caller's Flow, which may have
  -- changed since the run started.)
  end_run(KEYS[1], ARGV[1], R_CANCELLED, tonumber(redis.call('HGET', KEYS[1], F_RUN_RETENTION)) or 0,
    run_index_keys(KEYS[1], pfx))
else
  end_run(KEYS[1], ARGV[1], R_CANCELLED, tonumber(ARGV[3]), index_keys(KEYS[1], (list_from(ARGV, 9)), pfx))
end
if left then
  -- Left in its list for the take that reaches it, however long that
  -- takes: the run is kept with no expiry until then (expired first, its
  -- id would be buried by the take as missing: an ended run in the dead
  -- set). The end of that never-run taking (or its requeue) gives it its
  -- retention.
  redis.call('PERSIST', KEYS[1])
end
return out
