--- @include "codes"
--- @include "time"
--- @include "fix_type"
--- @include "bury"
--- @include "flow"
-- take_tasks pops up to max ids from the front of queue k.waiting for worker
-- w and records that w owns each taking (the body of the take script, also
-- run by end to take again in the same call). Bad task data never reaches a
-- worker and never loops: such a task goes to the dead set with the reason.
-- k: waiting, wq, holders, seq, dead, cfg (keys), tprefix.
-- mode: '0' a task queue, '1' a stage queue (the payload slot holds the run's
-- whole hash), '2' a child queue. maxc: crash limit (0 = none). A task of a
-- task queue whose deadline (F_DEADLINE) has passed is handed out with
-- attempt 0: its worker ends it as expired without running it. pfx: the tag's
-- prefixes (see prefixes). Returns the flat reply of take, or nil, 'moved'
-- when, with mode '<n>m', a task hash is on another cluster node (a slot
-- migration): then nothing changed.
local function take_tasks(k, w, max, maxc, mode, pfx)
  -- mode may end with 'm' (the store runs on a Redis Cluster): then every
  -- task hash is read before anything is written, ids included. During a
  -- slot migration a hash already moved to the importing node cannot be
  -- reached from here (the ids are read here, so they could not be
  -- declared) and Redis does not undo a script's writes: the take then
  -- reports it (nil, 'moved') having changed nothing.
  local safe = string.sub(mode, 2, 2) == 'm'
  mode = string.sub(mode, 1, 1)
  local ids
  if safe then
    ids = redis.call('LRANGE', k.waiting, 0, tonumber(max) - 1)
    if #ids == 0 then
      return {}
    end
  else
    ids = redis.call('LPOP', k.waiting, max)
    if not ids then
      return {}
    end
  end
  local data = {}
  for i, id in ipairs(ids) do
    local t = redis.pcall('HMGET', k.tprefix .. id, F_PAYLOAD, F_FAILURES, F_CRASHES, F_MAX_ATTEMPTS, F_TIMEOUT, F_PARENT, F_DEADLINE)
    if safe and type(t) == 'table' and t.err and string.find(t.err, 'non local key', 1, true) then
      return nil, 'moved'
    end
    data[i] = t
  end
  if safe then
    redis.call('LTRIM', k.waiting, #ids, -1)
  end
  local last = redis.call('INCRBY', k.seq, #ids)
  local pid = last - #ids
  local out = {}
  local held = {} -- pid, id, pid, id ... for the worker-queue hash
  for i, id in ipairs(ids) do
    pid = pid + 1
    local tkey = k.tprefix .. id
    local t = data[i]
    local reason
    if type(t) ~= 'table' or t.err then
      reason = fix_type(tkey)
    elseif not t[1] then
      if redis.call('EXISTS', tkey) == 0 then
        reason = 'missing: no task data for this id'
      else
        reason = 'corrupt: task data has no payload'
      end
    elseif (t[2] and not tonumber(t[2])) or (t[3] and not tonumber(t[3])) then
      reason = 'corrupt: attempt or crash count is not a number'
    elseif maxc > 0 and (tonumber(t[3]) or 0) >= maxc then
      reason = 'crashed: the task was running on ' .. t[3] .. ' workers that died'
    end
    if reason then
      bury(k.dead, k.cfg, k.tprefix, id, reason, '', w)
      buried_in_flow(tkey, id, reason, pfx, k.tprefix, mode == '2')
      out[#out + 1] = id
      out[#out + 1] = ''
      out[#out + 1] = reason
      for _ = 1, 5 do out[#out + 1] = '' end
    else
      local spid = tostring(pid)
      redis.call('HSET', tkey, F_STATE, S_ACTIVE, F_WORKER, w, F_PID, spid)
      held[#held + 1] = spid
      held[#held + 1] = id
      out[#out + 1] = id
      out[#out + 1] = spid
      if mode == '1' then
        out[#out + 1] = redis.call('HGETALL', tkey)
      else
        out[#out + 1] = t[1]
      end
      -- Attempt 0: the task's deadline has passed (Redis time). The worker
      -- does not run it; it ends the taking as expired (end, ask expire).
      local deadline = mode == '0' and tonumber(t[7])
      if deadline and now_ms() >= deadline then
        out[#out + 1] = 0
      else
        out[#out + 1] = (tonumber(t[2]) or 0) + 1
      end
      out[#out + 1] = tonumber(t[3]) or 0
      out[#out + 1] = t[4] or ''
      out[#out + 1] = t[5] or ''
      out[#out + 1] = t[6] or ''
    end
  end
  if #held > 0 then
    redis.call('HSET', k.wq, unpack(held))
    redis.call('SADD', k.holders, w)
  end
  return out
end
