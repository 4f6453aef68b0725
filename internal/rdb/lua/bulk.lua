--- @include "codes"
--- @include "bytes"
--- @include "cfg"
--- @include "finalize"
--- @include "packed"
--- @include "fair"
-- bulk: delete or cancel up to ARGV[3] tasks from the front of a queue's
-- waiting list or from its scheduled set (earliest first): one chunk of a
-- bulk operation, so that a million tasks never hold Redis in one call.
-- Stand-alone queues only (a flow's runs end with run_cancel).
-- KEYS[1] <ns>:{T}:q:<queue>          (list) waiting ids
-- KEYS[2] <ns>:{T}:s:<queue>          (zset) scheduled ids
-- KEYS[3] <ns>:{T}:cfg:<queue>        (hash) queue settings
-- KEYS[4] <ns>:{T}:done:<queue>       (zset) retained ended ids
-- ARGV[1] "waiting" | "scheduled" | "keys" | "fair"   ARGV[2] "delete" | "cancel"
-- ARGV[3] chunk size   ARGV[4] task key prefix   ARGV[5..] with "keys": the
-- keys (of an ordered queue) whose lists to empty; with "fair": the keys of
-- a fair queue whose lists fq:<queue>:<key> to empty, front first (their
-- names built from ARGV[4] and the queue's name, in KEYS[1]'s slot; the
-- ids that leave them are taken off the fair state hash's count, see
-- fair.lua; the keys' states stay: a take that finds a key in turn with
-- nothing takes it out)
-- A call stops early at its byte bound (at least one task is handled), so
-- that no call holds Redis for more than a few ms whatever the payloads
-- weigh: once the payload bytes its cancels copy pass COPY_BYTES (a cancel
-- makes a loaded task's hash from its packed field), or those its deletes
-- free pass FREE_BYTES. The tasks behind a key's head it reaches are not
-- counted (they are no loaded tasks).
-- Returns: {the number of tasks handled (the tasks waiting behind a key's
-- head included), 1 when the call stopped at its byte bound (else 0)};
-- fewer than the chunk size and 0 means none are left.
local n = tonumber(ARGV[3])
local retention = cfg_num(KEYS[3], 'retention', 0)
local qname = key_queue_of(ARGV[4], KEYS[3], 'cfg:')
local handled = 0

local drop

-- drain drops the tasks of a key's list, front first, while the call has
-- room: they wait behind the key's head, not in the queue's own list.
local function drain(list, count)
  while handled < n do
    local e = key_pop(list, count)
    if not e then break end
    drop((key_entry(e)), true)
    handled = handled + 1
  end
end

-- drop deletes or cancels task id (its hash, unique lock, packed field).
-- A key's head takes the tasks waiting behind it in the key's list along
-- (they are waiting too), as many as the call has room for; then its end
-- moves the key on: the next task left, if any, becomes the head, and a
-- later chunk reaches it.
drop = function(id, follower)
  local tkey = ARGV[4] .. id
  local t = redis.pcall('HMGET', tkey, F_UNIQUE, F_RETENTION, F_KEY)
  local u, task_ms, okey = nil, nil, nil
  if type(t) == 'table' and not t.err then u, task_ms, okey = t[1], t[2], t[3] end
  if okey and okey ~= '' and not follower then
    local heads, list, _, count = key_names(ARGV[4], qname, okey)
    if redis.pcall('HGET', heads, okey) == id then
      drain(list, count)
    end
  end
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

if ARGV[1] == 'keys' then
  -- The tasks waiting behind the heads of keys ARGV[5..] (a head running,
  -- or dead and blocking its key): the heads stay.
  for i = 5, #ARGV do
    local _, list, _, count = key_names(ARGV[4], qname, ARGV[i])
    drain(list, count)
  end
  return {handled, 0}
end

-- weight returns the bytes the drop of task id copies (a cancel of a
-- loaded task: its packed payload) and those it frees (a delete: its
-- payload and result, or its packed payload).
local function weight(id)
  local tkey = ARGV[4] .. id
  local packed = 0
  if ARGV[1] == 'waiting' and redis.call('EXISTS', tkey) == 0 then
    local key, field = packed_at(ARGV[4], id)
    packed = tonumber(redis.pcall('HSTRLEN', key, field)) or 0
  end
  if ARGV[2] == 'cancel' then
    return packed, 0
  end
  return 0, packed + (tonumber(redis.pcall('HSTRLEN', tkey, F_PAYLOAD)) or 0) +
    (tonumber(redis.pcall('HSTRLEN', tkey, F_RESULT)) or 0)
end

if ARGV[1] == 'fair' then
  local _, state, listp = FAIR.names(ARGV[4], qname)
  local cut, copied, freed = 0, 0, 0
  for i = 5, #ARGV do
    local list = listp .. ARGV[i]
    while handled < n and cut == 0 do
      local ids = redis.call('LRANGE', list, 0, n - handled - 1)
      if #ids == 0 then
        break
      end
      for j, id in ipairs(ids) do
        local c, f = weight(id)
        if (handled > 0 or j > 1) and (copied + c > COPY_BYTES or freed + f > FREE_BYTES) then
          for m = #ids, j, -1 do
            ids[m] = nil
          end
          cut = 1
          break
        end
        copied, freed = copied + c, freed + f
      end
      redis.call('LTRIM', list, #ids, -1)
      FAIR.count(state, -#ids)
      handled = handled + #ids
      for _, id in ipairs(ids) do
        drop(id, true)
      end
    end
  end
  return {handled, cut}
end

local ids
if ARGV[1] == 'waiting' then
  ids = redis.call('LRANGE', KEYS[1], 0, n - 1)
else
  ids = redis.call('ZRANGE', KEYS[2], 0, n - 1)
end
local copied, freed, cut = 0, 0, 0
for i, id in ipairs(ids) do
  local c, f = weight(id)
  if i > 1 and (copied + c > COPY_BYTES or freed + f > FREE_BYTES) then
    for j = #ids, i, -1 do
      ids[j] = nil
    end
    cut = 1
    break
  end
  copied, freed = copied + c, freed + f
end
if #ids > 0 then
  if ARGV[1] == 'waiting' then
    redis.call('LPOP', KEYS[1], #ids)
  else
    redis.call('ZREM', KEYS[2], unpack(ids))
  end
end
handled = #ids
for _, id in ipairs(ids) do
  drop(id, false)
end
return {handled, cut}
