--- @include "codes"
--- @include "time"
--- @include "cfg"
--- @include "level"
--- @include "own"
--- @include "fix_type"
--- @include "key"
--- @include "finalize"
--- @include "bury"
--- @include "fail"
--- @include "history"
--- @include "flow"
--- @include "fair"
-- ending: the end script's work (see end.lua), one function per kind of
-- taking, each taking what it reads as arguments. They live here, at the
-- top of the library, rather than in the script: a Lua function reads at
-- most 60 names of the functions around it, and has at most 200 locals
-- (run by EVAL, the script's main function holds every include's names).
-- e is the call: the queue's keys and prefixes, and what its ends announce:
--   sched_key, dead_key, cfg_key   the queue's scheduled, dead and config keys
--   tprefix                        the task key prefix
--   waiting, retained              its waiting list and retained set
--   retention                      ms the queue keeps ended tasks (0: none)
--   wake_channel                   its wake channel
--   pfx                            the tag's prefixes: queue, wake, sched, cancel, index
--   woken                          channel -> wake-ups owed, published at the end
--   freed                          the slots of fair queues' keys freed, given
--                                  back once per key at the end (fair_note)
-- (e is the q of fail_attempt: it has the fields it reads.)

-- end_wake owes n wake-ups on channel, published once at the end of the
-- call.
local function end_wake(e, channel, n)
  e.woken[channel] = (e.woken[channel] or 0) + n
end

-- end_give_back puts the taking back at the front of the queue (of its
-- priority level's list; a fair queue's task: of its key's list). pid: the
-- taking's, when the caller has not yet freed its key's slot (fair).
local function end_give_back(e, tkey, id, pid)
  local t = redis.pcall('HMGET', tkey, F_CANCEL, F_UNIQUE, F_RUN_STATUS, F_RETENTION, F_PRIORITY, F_KEY, F_FAIR_KEY, F_FAIR_PID)
  if t.err then
    -- Corrupt task data: put the id back; the take buries it with the reason.
    redis.call('LPUSH', e.waiting, id)
    end_wake(e, e.wake_channel, 1)
    return OUT_REQUEUED
  end
  if pid then
    FAIR.note(e.freed, FAIR.counted(t[7], t[8], pid))
  end
  if t[3] and t[3] ~= R_RUNNING then
    -- A flow run that ended (cancelled) while this taking ran: keep it as is.
    redis.call('HDEL', tkey, F_WORKER, F_PID)
    return OUT_CANCELLED
  end
  if t[1] then
    finalize(tkey, id, t[2], S_CANCELLED, cfg_num(e.cfg_key, 'retention', 0), '', e.retained, t[4], t[6])
    return OUT_CANCELLED
  end
  redis.call('HSET', tkey, F_STATE, S_QUEUED)
  redis.call('HDEL', tkey, F_WORKER, F_PID)
  if t[7] then
    FAIR.push(e.tprefix, FAIR.queue_of(e.tprefix, e.waiting), t[7], id, true)
  else
    redis.call('LPUSH', level_list(e.waiting, t[5]), id)
  end
  end_wake(e, e.wake_channel, 1)
  return OUT_REQUEUED
end

-- end_waited publishes on the queue's ended channel that task id ended in
-- state (done, cancelled, expired or dead), for the Client.Wait that
-- marked it (F_WAITED, read with the rest of the hash: a task nobody waits
-- for costs nothing more). The channel carries the queue's tag, as the
-- wake channel does (a sharded publish on a cluster).
local function end_waited(e, id, state)
  local base = string.sub(e.tprefix, 1, #e.tprefix - 2) -- <ns>:{T}:
  redis.call('PUBLISH', base .. 'ended:' .. key_queue_of(e.tprefix, e.waiting, 'q:'), state .. ' ' .. id)
end

-- end_task ends a taking of a plain queue. Ask 'expire' ends a taking the
-- take found past its deadline (never run), once Redis's clock confirms it;
-- ask 'cancel' one the take found marked cancelled where it waited (never
-- run): cancelled. A task a Client waits for (F_WAITED) has its end
-- published at once (end_waited).
-- pid: the taking's (a fair queue's key frees its slot).
local function end_task(e, tkey, id, ask, delay, err, result, worker, pid)
  local t = redis.pcall('HMGET', tkey, F_CANCEL, F_UNIQUE, F_RETENTION, F_DEADLINE, F_KEY, F_FAIR_KEY, F_FAIR_PID, F_WAITED,
    F_GATED)
  if t.err then
    bury(e.dead_key, e.cfg_key, e.tprefix, id, fix_type(tkey), '', worker)
    return OUT_DEAD
  end
  FAIR.note(e.freed, FAIR.counted(t[6], t[7], pid))
  local out, state
  if t[1] or ask == 'cancel' then
    -- (Ask cancel: the take found the mark; its state is cancelled and its
    -- unique lock released since the cancel, whatever became of the mark.)
    finalize(tkey, id, t[2], S_CANCELLED, e.retention, '', e.retained, t[3], t[5])
    out, state = OUT_CANCELLED, S_CANCELLED
  elseif ask == 'done' then
    finalize(tkey, id, t[2], S_DONE, e.retention, result, e.retained, t[3], t[5])
    out, state = OUT_DONE, S_DONE
  elseif ask == 'expire' then
    local deadline = tonumber(t[4])
    if not (deadline and now_ms() >= deadline) then
      -- Not past on this clock (a failover to a server whose clock is
      -- behind): it is not expired, so it goes back to be run.
      return end_give_back(e, tkey, id)
    end
    finalize(tkey, id, t[2], S_EXPIRED, e.retention, '', e.retained, t[3], t[5])
    out, state = OUT_EXPIRED, S_EXPIRED
  else
    out = fail_attempt(e, tkey, id, ask, delay, err, worker)
    if out == OUT_DEAD then
      state = S_DEAD
    end
  end
  if state and t[8] then
    end_waited(e, id, state)
  end
  if state and t[9] and t[6] and redis.call('HGET', e.cfg_key, 'thr') ~= '1' then
    -- A gated task ends: the key's pointer to it goes (enqueue_key.lua),
    -- but for a throttle's, which answers the key's enqueues while its
    -- rate log is full, after the task's end too.
    local _, fstate = FAIR.names(e.tprefix, FAIR.queue_of(e.tprefix, e.waiting))
    if redis.call('HGET', fstate, 'o:' .. t[6]) == id then
      redis.call('HDEL', fstate, 'o:' .. t[6])
    end
  end
  return out
end

-- end_stage ends a stage taking of flow run id: a done stage merges its
-- fields into the run, then fans out children or forwards the run. The
-- record's tail (REC_STAGE, then its lists) follows argv[tail].
local function end_stage(e, argv, tail, tkey, id, ask, delay, err, worker)
  local REC_STAGE = LAYOUT.REC_STAGE
  local nexts, policy = argv[tail + REC_STAGE.next_stage], argv[tail + REC_STAGE.policy]
  local runret = tonumber(argv[tail + REC_STAGE.run_retention])
  local props, b = list_from(argv, tail + REC_STAGE.N + 1)
  local fields, c = list_from(argv, b)
  local children = list_from(argv, c)
  local t = redis.pcall('HMGET', tkey, F_CANCEL, F_RUN_STATUS)
  if t.err then
    -- Corrupt run data: buried with the reason, as take does. An error here
    -- would abort the whole batch with this taking already released.
    bury(e.dead_key, e.cfg_key, e.tprefix, id, fix_type(tkey), '', worker)
    return OUT_DEAD
  end
  local pfx = e.pfx
  local ixkeys
  ixkeys, runret = stage_index_keys(tkey, props, pfx, runret)
  if t[2] ~= R_RUNNING then
    redis.call('HDEL', tkey, F_WORKER, F_PID)
    if t[2] == R_CANCELLED and redis.call('PTTL', tkey) == -1 then
      -- Cancelled while it waited deep in its list (kept until now, see
      -- run_cancel.lua): its retention starts.
      redis.call('PEXPIRE', tkey, runret)
    end
    return OUT_CANCELLED
  end
  if t[1] then
    end_run(tkey, id, R_CANCELLED, runret, ixkeys)
    return OUT_CANCELLED
  end
  if ask ~= 'done' then
    -- The stage ran: a signal it awaited before (its bound passed, or a
    -- RunNow woke it) is awaited no more, so that a signal does not cut
    -- the retry this schedules in the stage's set short (signal.lua).
    redis.call('HDEL', tkey, F_AWAIT)
    local out = fail_attempt(e, tkey, id, ask, delay, err, worker)
    if out == OUT_DEAD then
      redis.call('HSET', tkey, F_RUN_STATUS, R_FAILED, F_FINISHED_AT, now_ms())
      index_expire(ixkeys, id, now_ms() + runret)
    end
    return out
  end
  if #fields > 0 then
    hset_pairs(tkey, fields)
  end
  if #children == 0 then
    local sleep, await = tonumber(argv[tail + REC_STAGE.sleep]), argv[tail + REC_STAGE.await]
    if await ~= '' then
      return FLOW.await_run(tkey, id, await, nexts, pfx, runret, ixkeys, sleep)
    end
    return forward_run(tkey, id, nexts, pfx, runret, ixkeys, sleep)
  end
  FLOW.fan_out(tkey, id, children, e.tprefix, pfx, nexts, policy, function(cq)
    end_wake(e, pfx.wake .. cq, 1)
  end)
  redis.call('HDEL', tkey, F_WORKER, F_PID, F_FAILURES, F_CRASHES, F_ERROR, F_CRASHED_ON, F_AWAIT)
  return OUT_FANNED_OUT
end

-- end_child ends a child taking and counts it in its run, once; the last
-- pending child moves the run on, in the same step. fields: the state
-- fields a branch merges into its run when done. Third: the children
-- taken out of where they waited when this one failed its run, or, the
-- first done branch of a join on any, moved it on.
local function end_child(e, tkey, id, ask, delay, err, result, worker, runkey, runid, fields)
  -- Corrupt child or run data: the child is buried with the reason (an
  -- error would abort the whole batch with this taking already released).
  local x = redis.pcall('HGET', tkey, F_CANCEL)
  if type(x) == 'table' and x.err then
    bury(e.dead_key, e.cfg_key, e.tprefix, id, fix_type(tkey), '', worker)
    return OUT_DEAD, OUT_LOST
  end
  local r = redis.pcall('HMGET', runkey, F_RUN_STATUS, 'k:' .. id)
  if r.err then
    bury(e.dead_key, e.cfg_key, e.tprefix, id, 'corrupt: the data of its run ' .. runid .. ' is not a hash', '', worker)
    return OUT_DEAD, OUT_LOST
  end
  if r[1] ~= R_RUNNING or r[2] ~= 'pending' then
    -- The run ended (cancelled, failed) or this child was already counted.
    redis.call('DEL', tkey)
    return OUT_CANCELLED, OUT_LOST
  end
  if x then
    ask, err = 'cancelled', 'cancelled'
  end
  if ask == 'retry' or ask == 'later' then
    return fail_attempt(e, tkey, id, ask, delay, err, worker), OUT_LOST
  end
  if ask == 'done' then
    local run, removed = child_ended(runkey, runid, id, tkey, true, result, err, e.pfx, e.tprefix, fields)
    redis.call('DEL', tkey)
    return OUT_DONE, run, removed
  end
  local run, removed = child_ended(runkey, runid, id, tkey, false, '', err, e.pfx, e.tprefix)
  if ask == 'cancelled' then
    redis.call('DEL', tkey)
    return OUT_CANCELLED, run, removed
  end
  return fail_attempt(e, tkey, id, 'dead', delay, err, worker), run, removed
end

-- end_batch ends a batch of one key (QueueConfig.KeyBatch): the head's
-- taking (tkey, id) and those of the tasks taken behind it (fkeys, fids,
-- fres: their hashes, ids, results), all owned (the caller checked). Done:
-- every member ends done. Otherwise the tasks behind the head go back to
-- the front of the key's list in their order, then the head ends as asked:
-- retry or later (scheduled, keeping the key's head; a retry counts a
-- failed attempt on every member), give back (the front of the queue), or
-- dead (Lowkiq's rule: the head, the oldest, goes dead and blocks the key
-- or lets it move on as the queue says; the others wait, their counters
-- reset). A member whose cancel was asked ends as cancelled. Returns the
-- head's outcome and the others', in order.
local function end_batch(e, tkey, id, ask, delay, err, result, worker, fkeys, fids, fres)
  local qname = key_queue_of(e.tprefix, e.waiting, 'q:')
  local h = redis.pcall('HMGET', tkey, F_CANCEL, F_UNIQUE, F_RETENTION, F_KEY)
  local okey = (not h.err) and h[4] or nil
  local codes, back = {}, {}
  for j, fkey in ipairs(fkeys) do
    local f = redis.pcall('HMGET', fkey, F_CANCEL, F_RETENTION, F_KEY, F_STARTED, F_HISTORY_SEQ)
    okey = okey or ((not f.err) and f[3]) or nil
    if f.err then
      bury(e.dead_key, e.cfg_key, e.tprefix, fids[j], fix_type(fkey), '', worker)
      codes[j] = OUT_DEAD
    elseif f[1] then
      finalize(fkey, fids[j], nil, S_CANCELLED, e.retention, '', e.retained, f[2], nil)
      codes[j] = OUT_CANCELLED
    elseif ask == 'done' then
      finalize(fkey, fids[j], nil, S_DONE, e.retention, fres[j], e.retained, f[2], nil)
      codes[j] = OUT_DONE
    else
      if ask == 'retry' then
        -- (A failed attempt of each member: in its history too.)
        local failures = redis.call('HINCRBY', fkey, F_FAILURES, 1)
        redis.call('HSET', fkey, F_ERROR, err, history_pairs(f[5], failures, f[4], 'retry', worker, err))
        codes[j] = OUT_RETRY
      elseif ask == 'later' then
        codes[j] = OUT_RETRY
      else
        if ask == 'dead' then
          redis.call('HDEL', fkey, F_FAILURES, F_CRASHES, F_CRASHED_ON)
        end
        codes[j] = OUT_REQUEUED
      end
      back[#back + 1] = fids[j]
    end
  end
  if okey and #back > 0 then
    key_batch_return(e.tprefix, qname, okey, back)
  end
  if h.err then
    bury(e.dead_key, e.cfg_key, e.tprefix, id, fix_type(tkey), '', worker)
    return OUT_DEAD, codes
  end
  redis.call('HDEL', tkey, F_BATCH)
  if ask == 'back' or ask == 'expire' then
    return end_give_back(e, tkey, id), codes
  end
  if h[1] then
    finalize(tkey, id, h[2], S_CANCELLED, e.retention, '', e.retained, h[3], h[4])
    return OUT_CANCELLED, codes
  end
  if ask == 'done' then
    finalize(tkey, id, h[2], S_DONE, e.retention, result, e.retained, h[3], h[4])
    return OUT_DONE, codes
  end
  return fail_attempt(e, tkey, id, ask, delay, err, worker), codes
end

-- end_owned checks the ownership of every taking but batches together
-- (own_all): a first pass over the records (from argv[i], their keys from
-- keys[k]) reads each one's worker-queue hash, pid and id. Returns whether
-- each is owned, in order.
local function end_owned(keys, argv, k, i)
  local REC, REC_BATCH = LAYOUT.REC, LAYOUT.REC_BATCH
  local singles = {}
  while i <= #argv do
    local kind = argv[i + REC.kind]
    if kind == 'batch' then
      k = k + 2 + tonumber(argv[i + REC.N + REC_BATCH.members])
    else
      singles[#singles + 1] = {keys[k], argv[i + REC.pid], argv[i + REC.id]}
      k = k + (kind == 'child' and 3 or 2)
    end
    i = i + tonumber(argv[i]) + 1
  end
  return own_all(singles)
end

-- end_records ends every taking of the call, in order: the records from
-- argv[i] on, their keys from keys[k] on (see end.lua). Returns the ENDED
-- rows, the batches' members' outcomes, the STOPPED rows, and how many
-- takings the batches freed beyond one each.
local function end_records(e, keys, argv, k, i)
  local REC = LAYOUT.REC
  local owned = end_owned(keys, argv, k, i)
  local out, members, stopped = {}, {}, {}
  local freed_more = 0 -- takings a batch freed beyond one
  local s = 0
  while i <= #argv do
    -- A record at i: its size, its REC, then its kind's tail after argv[tail].
    local n, tail = tonumber(argv[i]), i + REC.N
    local kind, worker, pid, id = argv[i + REC.kind], argv[i + REC.worker], argv[i + REC.pid], argv[i + REC.id]
    local ask, delay, err, result = argv[i + REC.ask], argv[i + REC.delay], argv[i + REC.err], argv[i + REC.result]
    local wq, tkey = keys[k], keys[k + 1]
    k = k + 2
    local runkey
    if kind == 'child' then
      runkey = keys[k]
      k = k + 1
    end
    local code, run = OUT_LOST, OUT_LOST
    if kind == 'batch' then
      -- A batch: REC_BATCH (m), then per member behind the head a MEMBER
      -- (its pid, id and result); keys its hashes. Owned only if every
      -- member is (else, lost, nothing changed: a zombie's batch).
      local MEMBER = LAYOUT.MEMBER
      local m = tonumber(argv[tail + LAYOUT.REC_BATCH.members])
      local pids, fkeys, fids, fres = {pid}, {}, {}, {}
      for j = 1, m do
        local a = tail + LAYOUT.REC_BATCH.N + MEMBER.N * (j - 1)
        pids[#pids + 1] = argv[a + MEMBER.pid]
        fids[j], fres[j] = argv[a + MEMBER.id], argv[a + MEMBER.result]
        fkeys[j] = keys[k + j - 1]
      end
      k = k + m
      local ids = {id}
      for j = 1, m do
        ids[j + 1] = fids[j]
      end
      local codes = {}
      if own_every(wq, pids, ids) then
        code, codes = end_batch(e, tkey, id, ask, delay, err, result, worker, fkeys, fids, fres)
        freed_more = freed_more + m
      end
      for j = 1, m do
        members[#members + 1] = codes[j] or OUT_LOST
      end
    else
      s = s + 1
      if not owned[s] then
        -- Lost: not the owner; nothing changed.
      elseif ask == 'back' then
        code = end_give_back(e, tkey, id, pid)
      elseif kind == 'stage' then
        code = end_stage(e, argv, tail, tkey, id, ask, delay, err, worker)
      elseif kind == 'child' then
        local removed
        code, run, removed = end_child(e, tkey, id, ask, delay, err, result, worker, runkey,
          argv[tail + LAYOUT.REC_CHILD.run], list_from(argv, tail + LAYOUT.REC_CHILD.N + 1))
        local STOPPED = LAYOUT.STOPPED
        for j = 1, #(removed or {}), 2 do
          local r = #stopped
          stopped[r + STOPPED.at] = string.format('%d', #out / LAYOUT.ENDED.N + 1)
          stopped[r + STOPPED.queue], stopped[r + STOPPED.id] = removed[j], removed[j + 1]
        end
      else
        code = end_task(e, tkey, id, ask, delay, err, result, worker, pid)
      end
    end
    local ENDED, o = LAYOUT.ENDED, #out
    out[o + ENDED.outcome], out[o + ENDED.run] = code, run
    i = i + n + 1
  end
  return out, members, stopped, freed_more
end
