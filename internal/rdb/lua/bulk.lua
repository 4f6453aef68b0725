--- @include "codes"
--- @include "cfg"
--- @include "finalize"
--- @include "packed"
-- bulk: delete or cancel up to ARGV[3] tasks from the front of a queue's
-- waiting list or from its scheduled set (earliest first): one chunk of a
-- bulk operation, so that a million tasks never hold Redis in one call.
-- Stand-alone queues only (a flow's runs end with run_cancel).
-- KEYS[1] <ns>:{T}:q:<queue>          (list) waiting ids
-- KEYS[2] <ns>:{T}:s:<queue>          (zset) scheduled ids
-- KEYS[3] <ns>:{T}:cfg:<queue>        (hash) queue settings
-- KEYS[4] <ns>:{T}:done:<queue>       (zset) retained ended ids
-- ARGV[1] "waiting" | "scheduled"   ARGV[2] "delete" | "cancel"
-- ARGV[3] chunk size   ARGV[4] task key prefix
-- Returns: the number of tasks handled; fewer than the chunk size means none
-- are left.
local n = tonumber(ARGV[3])
local ids
if ARGV[1] == 'waiting' then
  ids = redis.call('LPOP', KEYS[1], n) or {}
else
  ids = redis.call('ZRANGE', KEYS[2], 0, n - 1)
  if #ids > 0 then
    redis.call('ZREM', KEYS[2], unpack(ids))
  end
end
local retention = cfg_num(KEYS[3], 'retention', 0)
for _, id in ipairs(ids) do
  local tkey = ARGV[4] .. id
  local t = redis.pcall('HMGET', tkey, F_UNIQUE, F_RETENTION, F_KEY)
  local u, task_ms, okey = nil, nil, nil
  if type(t) == 'table' and not t.err then u, task_ms, okey = t[1], t[2], t[3] end
  -- An id with no task data is only dropped: a cancel must not make up a
  -- record of a task that does not exist. A waiting id with no hash may be a
  -- loaded task, packed (see packed.lua): a cancel makes its hash first, a
  -- delete drops its packed field.
  if ARGV[2] == 'cancel' and type(t) == 'table' and not t.err and
      (redis.call('EXISTS', tkey) == 1 or (ARGV[1] == 'waiting' and unpack_task(tkey, ARGV[4], id))) then
    finalize(tkey, id, u, S_CANCELLED, retention, '', KEYS[4], task_ms, okey)
  else
    release_unique(u, id)
    key_ended(tkey, id, okey, KEYS[4], 'done:')
    if redis.call('DEL', tkey) == 0 and ARGV[1] == 'waiting' then
      packed_drop(ARGV[4], id)
    end
  end
end
return #ids
