--- @include "codes"
--- @include "level"
--- @include "cfg"
--- @include "finalize"
--- @include "fair"
-- batch_claim reports whether the taking of task fid (a member of the batch
-- headed by head) is the caller's to put back: it is held in this run
-- (mine), or it is still taken (state active) in that batch (its F_BATCH_OF
-- names head: a head's list of members may be stale) and its pid is still
-- in the holdings of the worker named by its hash, where this takes it out.
local function batch_claim(fid, head, mine, tprefix, qname)
  if mine[fid] then
    return true
  end
  local f = redis.pcall('HMGET', tprefix .. fid, F_STATE, F_WORKER, F_PID, F_BATCH_OF)
  if f.err or f[1] ~= S_ACTIVE or not f[2] or not f[3] or (fid ~= head and f[4] ~= head) then
    return false
  end
  local base = string.sub(tprefix, 1, #tprefix - 2)
  return redis.call('HDEL', base .. 'wq:' .. qname .. ':' .. f[2], f[3]) == 1
end

-- requeue_batch puts back a batch of one key (see key.lua): the tasks
-- taken behind its head go back to the front of the key's list in their
-- order, then the head to the front of the queue, as any taking (a
-- crash is counted on the head alone: the tasks behind it did not choose
-- to run with it). A member whose cancel was asked ends as cancelled. Only
-- the members whose takings are the caller's (batch_claim) move; each is
-- marked in gone. Returns requeued; the takings ended as cancelled are
-- added to cancelled (id, pid, worker: the pid and worker are '' for a
-- member behind the head, which the head's holder held).
local function requeue_batch(head, mine, gone, queue, cfg, retained, tprefix, crashed, cancelled)
  local qname = key_queue_of(tprefix, queue, 'q:')
  local hkey = tprefix .. head
  local h = redis.pcall('HMGET', hkey, F_CANCEL, F_UNIQUE, F_STATE, F_WORKER, F_CRASHED_ON, F_RETENTION, F_KEY, F_BATCH)
  local requeued = 0
  if h.err then
    -- The head's data is corrupt (a task behind it names it): the caller
    -- puts that task back alone; the take buries the head.
    return requeued
  end
  local back = {}
  for _, fid in ipairs(key_batch_split(h[8])) do
    if not gone[fid] and batch_claim(fid, head, mine, tprefix, qname) then
      gone[fid] = true
      local x = redis.pcall('HGET', tprefix .. fid, F_CANCEL)
      if x == '1' then
        local fr = redis.call('HGET', tprefix .. fid, F_RETENTION)
        finalize(tprefix .. fid, fid, nil, S_CANCELLED, cfg_num(cfg, 'retention', 0), '', retained, fr, nil)
        cancelled[#cancelled + 1] = fid
        cancelled[#cancelled + 1] = ''
        cancelled[#cancelled + 1] = ''
      else
        back[#back + 1] = fid
      end
    end
  end
  if h[7] and #back > 0 then
    key_batch_return(tprefix, qname, h[7], back)
    requeued = requeued + #back
  end
  if gone[head] or h[3] ~= S_ACTIVE or not batch_claim(head, head, mine, tprefix, qname) then
    return requeued
  end
  gone[head] = true
  redis.call('HDEL', hkey, F_BATCH)
  if h[1] then
    finalize(hkey, head, h[2], S_CANCELLED, cfg_num(cfg, 'retention', 0), '', retained, h[6], h[7])
    cancelled[#cancelled + 1] = head
    cancelled[#cancelled + 1] = ''
    cancelled[#cancelled + 1] = h[4] or ''
    return requeued
  end
  if crashed and (not h[4] or h[4] ~= h[5]) then
    redis.call('HINCRBY', hkey, F_CRASHES, 1)
    if h[4] then
      redis.call('HSET', hkey, F_CRASHED_ON, h[4])
    end
  end
  redis.call('HSET', hkey, F_STATE, S_QUEUED)
  redis.call('HDEL', hkey, F_WORKER, F_PID)
  redis.call('LPUSH', queue, head)
  return requeued + 1
end

-- requeue_pids puts the takings held (a list of {pid = number, id = task
-- id, w = its worker or nil}) back at the front of queue (of its priority
-- level's list), oldest first. A task whose cancel was asked ends as
-- cancelled; a flow run that ended meanwhile is left as it is;
-- crashed counts a crash on each, once per dead worker: a zombie that took
-- its own requeued task again before it noticed its death is not counted
-- twice (F_CRASHED_ON remembers the last worker counted). A fair queue's
-- task goes back to the front of its key's list, and its taking's slot in
-- its key's running count is given back (fair.lua). Returns requeued, the
-- takings ended as cancelled: id, pid, worker ('' unknown), flat, and how
-- many of a fair queue's keys went back in turn (a wake-up each).
local function requeue_pids(held, queue, cfg, retained, tprefix, crashed)
  -- pids number takings in the order tasks left the queue: push the newest
  -- first so that the oldest ends up at the very front.
  table.sort(held, function(x, y) return x.pid < y.pid end)
  local requeued, cancelled = 0, {}
  local mine, gone = {}, {} -- batches: members held here; members handled
  local freed = {order = {}, n = {}} -- fair queues' keys' slots (fair_note)
  for _, h in ipairs(held) do
    mine[h.id] = true
  end
  for i = #held, 1, -1 do
    local id = held[i].id
    local tkey = tprefix .. id
    local t = redis.pcall('HMGET', tkey, F_CANCEL, F_UNIQUE, F_STATE, F_RUN_STATUS, F_WORKER, F_CRASHED_ON, F_RETENTION, F_PRIORITY, F_KEY, F_BATCH, F_BATCH_OF, F_FAIR_KEY, F_FAIR_PID)
    if not t.err then
      FAIR.note(freed, FAIR.counted(t[12], t[13], string.format('%d', held[i].pid)))
    end
    if not t.err and (t[10] or t[11]) and t[3] == S_ACTIVE and not gone[id] then
      -- A member of a batch (its head, or a task taken with it): the whole
      -- batch goes back now, here, whichever member came first (the one
      -- with the highest pid: the head's place in the queue is then
      -- right, as the batch's pids follow each other).
      requeued = requeued + requeue_batch(t[11] or id, mine, gone, queue, cfg, retained, tprefix, crashed, cancelled)
      if not gone[id] and t[11] and t[9] then
        -- Its head does not name it (data changed by hand): back alone.
        gone[id] = true
        key_batch_return(tprefix, key_queue_of(tprefix, queue, 'q:'), t[9], {id})
        requeued = requeued + 1
      end
    elseif gone[id] then
      -- Already put back with its batch.
    elseif t.err then
      -- Corrupt data: requeue the id; the take buries it with the reason.
      redis.call('LPUSH', queue, id)
      requeued = requeued + 1
    elseif t[4] and t[4] ~= R_RUNNING then
      -- A flow run that ended (cancelled) while this taking ran: keep it.
      redis.call('HDEL', tkey, F_WORKER, F_PID)
      if t[4] == R_CANCELLED and redis.call('PTTL', tkey) == -1 then
        -- Cancelled deep in its list, kept until its taking ended (see
        -- run_cancel.lua): its retention starts.
        redis.call('PEXPIRE', tkey, tonumber(redis.call('HGET', tkey, F_RUN_RETENTION)) or 86400000)
      end
    elseif t[1] then
      finalize(tkey, id, t[2], S_CANCELLED, cfg_num(cfg, 'retention', 0), '', retained, t[7], t[9])
      cancelled[#cancelled + 1] = id
      cancelled[#cancelled + 1] = string.format('%d', held[i].pid)
      cancelled[#cancelled + 1] = held[i].w or ''
    elseif t[3] == S_ACTIVE then
      if crashed and (not t[5] or t[5] ~= t[6]) then
        redis.call('HINCRBY', tkey, F_CRASHES, 1)
        if t[5] then
          redis.call('HSET', tkey, F_CRASHED_ON, t[5])
        end
      end
      redis.call('HSET', tkey, F_STATE, S_QUEUED)
      redis.call('HDEL', tkey, F_WORKER, F_PID)
      if t[12] then
        FAIR.push(tprefix, FAIR.queue_of(tprefix, queue), t[12], id, true)
      else
        redis.call('LPUSH', level_list(queue, t[8]), id)
      end
      requeued = requeued + 1
    end
  end
  return requeued, cancelled, FAIR.free(tprefix, FAIR.queue_of(tprefix, queue), freed)
end
