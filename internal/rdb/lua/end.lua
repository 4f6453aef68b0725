--- @include "codes"
--- @include "level"
--- @include "own"
--- @include "fix_type"
--- @include "finalize"
--- @include "fail"
--- @include "flow"
--- @include "take"
-- end: the one way a taking ends. Ends a batch of takings of one queue (group
-- commit), each checked for ownership on its own and answered on its own:
-- done, retry, dead, give back, and for flows a stage's forward or fan-out
-- and a child's end. A cancel asked while a taking ran wins over what the
-- handler said.
-- KEYS[1] <ns>:{T}:s:<queue>          (zset) scheduled ids by due time
-- KEYS[2] <ns>:{T}:dead:<queue>       (zset) dead ids by time of death
-- KEYS[3] <ns>:{T}:cfg:<queue>        (hash) queue settings
-- KEYS[4] <ns>:{T}:q:<queue>          (list) waiting ids (give back)
-- KEYS[5] <ns>:{T}:done:<queue>       (zset) retained ended ids by finish time
-- KEYS[6] <ns>:{T}:h:<queue>          (set)  workers that may hold takings
-- KEYS[7] <ns>:{T}:seq                (string) taking counter of the tag
-- KEYS[8] <ns>:{T}:wq:<queue>:<w>     (hash) pid -> id the taking worker holds
-- then per taking, in ARGV order:
--   <ns>:{T}:wq:<queue>:<w> (hash), <ns>:{T}:t:<id> (hash), and for a child
--   its run <ns>:{T}:t:<run id> (hash), for a batch each member's hash
-- then the keys the stage ends write by name, declared so that a cluster
-- checks them before the script runs (the script reaches them from the
-- prefixes in ARGV): per stage taking, its next stage's queue
-- <ns>:{T}:q:<next> when it fans out nothing, else each child's hash
-- <ns>:{T}:t:<child> and each child queue <ns>:{T}:q:<child queue>
-- then, when the take parks (END.park > 0: it may park the worker), the park
-- hash <ns>:{T}:park:<queue>, last
-- ARGV: the layout LAYOUT.END (endArgv in end.go): task_prefix, wake_channel (the
--   queue's), the tag's queue .. index prefixes, retention (ms of ended
--   tasks, 0 = delete at once), then a take's fields (takeFields in
--   take.go) to take again, after the ends, as the take script would:
--   max (0 = take nothing), worker (KEYS[8]'s), deadline (nothing is taken
--   at or past it), max_crashes, kind, safe, levels, limited, batch, park,
--   park_ms (see take_tasks). With limited (the queue may have global
--   limits), ends that free slots not taken again are announced on the
--   wake channel.
-- ARGV[END.N + 1 ..] per taking, a record: a size n, then n values: the
--   layout REC (endRecord in end.go): kind (task | stage | child | batch),
--   worker id, pid, task id, ask (done | retry | dead | back | expire |
--   cancel), retry delay ms, error text, result; then the kind's tail:
--   a child's REC_CHILD (its run id); a stage's REC_STAGE (its next stage,
--   "" after the last, its fan-out policy, failfast | continue, the run
--   retention ms), then three counted lists: indexed properties, state
--   field/value pairs ("f:" names), the children fanned out (FANOUT values
--   each: id, queue, payload and metadata, "" for none); a batch's (a key's
--   head and the tasks taken behind it, ended together) REC_BATCH (a count
--   m), then m MEMBER values (pid, id, result); it declares its members'
--   hashes <ns>:{T}:t:<id> after the head's.
-- Returns: the layout END_REPLY (endReply in end.go): ends (per taking, an
-- ENDED row: its outcome, OUT_*, OUT_LOST when not the owner: nothing
-- changed; and, for a child, its run's, OUT_LOST when unchanged); taken
-- (the take's reply, TAKEN rows; empty when nothing was asked or the
-- deadline had passed); members (the outcomes of the batches' members, in
-- order); stopped (when a child's end failed its run and that took waiting
-- children out of their queues, per such child a STOPPED row: the 1-based
-- position of the taking that ended, its queue and its id).
-- (Each layout is bound where it is read: run by EVAL, this script's main
-- function is near Lua's limit of 200 locals.)
local END, REC = LAYOUT.END, LAYOUT.REC
local q = {sched_key = KEYS[1], dead_key = KEYS[2], cfg_key = KEYS[3], tprefix = ARGV[END.task_prefix]}
local waiting, retained = KEYS[4], KEYS[5]
local pfx = {queue = ARGV[END.queue_prefix], wake = ARGV[END.wake_prefix], sched = ARGV[END.sched_prefix],
  cancel = ARGV[END.cancel_prefix], index = ARGV[END.index_prefix]}
local retention = tonumber(ARGV[END.retention])
local woken = {}
key_wakes = woken -- the keys' next tasks are published with the rest, once

local function wake(channel, n)
  woken[channel] = (woken[channel] or 0) + n
end

-- give_back puts the taking back at the front of the queue (of its
-- priority level's list).
local function give_back(tkey, id)
  local t = redis.pcall('HMGET', tkey, F_CANCEL, F_UNIQUE, F_RUN_STATUS, F_RETENTION, F_PRIORITY, F_KEY)
  if t.err then
    -- Corrupt task data: put the id back; the take buries it with the reason.
    redis.call('LPUSH', waiting, id)
    wake(ARGV[END.wake_channel], 1)
    return OUT_REQUEUED
  end
  if t[3] and t[3] ~= R_RUNNING then
    -- A flow run that ended (cancelled) while this taking ran: keep it as is.
    redis.call('HDEL', tkey, F_WORKER, F_PID)
    return OUT_CANCELLED
  end
  if t[1] then
    finalize(tkey, id, t[2], S_CANCELLED, cfg_num(q.cfg_key, 'retention', 0), '', retained, t[4], t[6])
    return OUT_CANCELLED
  end
  redis.call('HSET', tkey, F_STATE, S_QUEUED)
  redis.call('HDEL', tkey, F_WORKER, F_PID)
  redis.call('LPUSH', level_list(waiting, t[5]), id)
  wake(ARGV[END.wake_channel], 1)
  return OUT_REQUEUED
end

-- end_task ends a taking of a plain queue. Ask 'expire' ends a taking the
-- take found past its deadline (never run), once Redis's clock confirms it;
-- ask 'cancel' one the take found marked cancelled where it waited (never
-- run): cancelled.
local function end_task(tkey, id, ask, delay, err, result, worker)
  local t = redis.pcall('HMGET', tkey, F_CANCEL, F_UNIQUE, F_RETENTION, F_DEADLINE, F_KEY)
  if t.err then
    bury(q.dead_key, q.cfg_key, q.tprefix, id, fix_type(tkey), '', worker)
    return OUT_DEAD
  end
  if t[1] or ask == 'cancel' then
    -- (Ask cancel: the take found the mark; its state is cancelled and its
    -- unique lock released since the cancel, whatever became of the mark.)
    finalize(tkey, id, t[2], S_CANCELLED, retention, '', retained, t[3], t[5])
    return OUT_CANCELLED
  end
  if ask == 'done' then
    finalize(tkey, id, t[2], S_DONE, retention, result, retained, t[3], t[5])
    return OUT_DONE
  end
  if ask == 'expire' then
    local deadline = tonumber(t[4])
    if deadline and now_ms() >= deadline then
      finalize(tkey, id, t[2], S_EXPIRED, retention, '', retained, t[3], t[5])
      return OUT_EXPIRED
    end
    -- Not past on this clock (a failover to a server whose clock is
    -- behind): it is not expired, so it goes back to be run.
    return give_back(tkey, id)
  end
  return fail_attempt(q, tkey, id, ask, delay, err, worker)
end

-- end_stage ends a stage taking of flow run id: a done stage merges its
-- fields into the run, then fans out children or forwards the run. The
-- record's tail (REC_STAGE, then its lists) follows ARGV[tail].
local function end_stage(tkey, id, ask, delay, err, worker, tail)
  local REC_STAGE, FANOUT = LAYOUT.REC_STAGE, LAYOUT.FANOUT
  local nexts, policy = ARGV[tail + REC_STAGE.next_stage], ARGV[tail + REC_STAGE.policy]
  local runret = tonumber(ARGV[tail + REC_STAGE.run_retention])
  local props, b = list_from(ARGV, tail + REC_STAGE.N + 1)
  local fields, c = list_from(ARGV, b)
  local children = list_from(ARGV, c)
  local t = redis.pcall('HMGET', tkey, F_CANCEL, F_RUN_STATUS)
  if t.err then
    -- Corrupt run data: buried with the reason, as take does. An error here
    -- would abort the whole batch with this taking already released.
    bury(q.dead_key, q.cfg_key, q.tprefix, id, fix_type(tkey), '', worker)
    return OUT_DEAD
  end
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
    local out = fail_attempt(q, tkey, id, ask, delay, err, worker)
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
    return forward_run(tkey, id, nexts, pfx, runret, ixkeys)
  end
  local n = 0
  -- The fan-out's number in the run ('kg'), kept on each child ('pe'): a
  -- dead child is requeued into its run only while the run waits for that
  -- fan-out (dead.lua).
  local gen = redis.call('HINCRBY', tkey, 'kg', 1)
  local cids = {} -- 'kl': this fan-out's children, for a stop (flow.lua)
  for k = 0, #children - 1, FANOUT.N do
    local cid, cq = children[k + FANOUT.id], children[k + FANOUT.queue]
    local payload, meta = children[k + FANOUT.payload], children[k + FANOUT.meta]
    local ckey = q.tprefix .. cid
    redis.call('HSET', ckey, F_PAYLOAD, payload, F_PARENT, id, F_PARENT_NEXT, nexts, F_PARENT_POLICY, policy, 'pe', gen)
    if meta ~= '' then
      redis.call('HSET', ckey, F_META, meta)
    end
    redis.call('RPUSH', pfx.queue .. cq, cid)
    redis.call('HSET', tkey, 'k:' .. cid, 'pending', 'kq:' .. cid, cq)
    wake(pfx.wake .. cq, 1)
    n = n + 1
    cids[n] = cid
  end
  redis.call('HSET', tkey, F_PENDING, n, F_STATE, S_CHILDREN, 'kl', 'g' .. gen .. ' ' .. table.concat(cids, ' '))
  redis.call('HDEL', tkey, F_WORKER, F_PID, F_FAILURES, F_CRASHES, F_ERROR, F_CRASHED_ON)
  return OUT_FANNED_OUT
end

-- end_child ends a child taking and counts it in its run, once; the last
-- pending child moves the run on, in the same step. Third: the children
-- taken out of where they waited when this one failed its run.
local function end_child(tkey, id, ask, delay, err, result, worker, runkey, runid)
  -- Corrupt child or run data: the child is buried with the reason (an
  -- error would abort the whole batch with this taking already released).
  local x = redis.pcall('HGET', tkey, F_CANCEL)
  if type(x) == 'table' and x.err then
    bury(q.dead_key, q.cfg_key, q.tprefix, id, fix_type(tkey), '', worker)
    return OUT_DEAD, OUT_LOST
  end
  local r = redis.pcall('HMGET', runkey, F_RUN_STATUS, 'k:' .. id)
  if r.err then
    bury(q.dead_key, q.cfg_key, q.tprefix, id, 'corrupt: the data of its run ' .. runid .. ' is not a hash', '', worker)
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
    return fail_attempt(q, tkey, id, ask, delay, err, worker), OUT_LOST
  end
  if ask == 'done' then
    local run = child_ended(runkey, runid, id, tkey, true, result, err, pfx, q.tprefix)
    redis.call('DEL', tkey)
    return OUT_DONE, run
  end
  local run, removed = child_ended(runkey, runid, id, tkey, false, '', err, pfx, q.tprefix)
  if ask == 'cancelled' then
    redis.call('DEL', tkey)
    return OUT_CANCELLED, run, removed
  end
  return fail_attempt(q, tkey, id, 'dead', delay, err, worker), run, removed
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
local function end_batch(tkey, id, ask, delay, err, result, worker, fkeys, fids, fres)
  local qname = key_queue_of(q.tprefix, waiting, 'q:')
  local h = redis.pcall('HMGET', tkey, F_CANCEL, F_UNIQUE, F_RETENTION, F_KEY)
  local okey = (not h.err) and h[4] or nil
  local codes, back = {}, {}
  for j, fkey in ipairs(fkeys) do
    local f = redis.pcall('HMGET', fkey, F_CANCEL, F_RETENTION, F_KEY)
    okey = okey or ((not f.err) and f[3]) or nil
    if f.err then
      bury(q.dead_key, q.cfg_key, q.tprefix, fids[j], fix_type(fkey), '', worker)
      codes[j] = OUT_DEAD
    elseif f[1] then
      finalize(fkey, fids[j], nil, S_CANCELLED, retention, '', retained, f[2], nil)
      codes[j] = OUT_CANCELLED
    elseif ask == 'done' then
      finalize(fkey, fids[j], nil, S_DONE, retention, fres[j], retained, f[2], nil)
      codes[j] = OUT_DONE
    else
      if ask == 'retry' then
        redis.call('HINCRBY', fkey, F_FAILURES, 1)
        redis.call('HSET', fkey, F_ERROR, err)
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
    key_batch_return(q.tprefix, qname, okey, back)
  end
  if h.err then
    bury(q.dead_key, q.cfg_key, q.tprefix, id, fix_type(tkey), '', worker)
    return OUT_DEAD, codes
  end
  redis.call('HDEL', tkey, F_BATCH)
  if ask == 'back' or ask == 'expire' then
    return give_back(tkey, id), codes
  end
  if h[1] then
    finalize(tkey, id, h[2], S_CANCELLED, retention, '', retained, h[3], h[4])
    return OUT_CANCELLED, codes
  end
  if ask == 'done' then
    finalize(tkey, id, h[2], S_DONE, retention, result, retained, h[3], h[4])
    return OUT_DONE, codes
  end
  return fail_attempt(q, tkey, id, ask, delay, err, worker), codes
end

-- The ownership of every taking but batches, checked together (own_all):
-- a first pass over the takings reads their worker-queue hash, pid and id.
local singles = {}
do
  local REC_BATCH = LAYOUT.REC_BATCH
  local k, i = 9, END.N + 1
  while i <= #ARGV do
    local kind = ARGV[i + REC.kind]
    if kind == 'batch' then
      k = k + 2 + tonumber(ARGV[i + REC.N + REC_BATCH.members])
    else
      singles[#singles + 1] = {KEYS[k], ARGV[i + REC.pid], ARGV[i + REC.id]}
      k = k + (kind == 'child' and 3 or 2)
    end
    i = i + tonumber(ARGV[i]) + 1
  end
end
local owned = own_all(singles)

local out, members, stopped = {}, {}, {}
local freed_more = 0 -- takings a batch freed beyond one
local k, i, s = 9, END.N + 1, 0
while i <= #ARGV do
  -- A record at i: its size, its REC, then its kind's tail after ARGV[tail].
  local n, tail = tonumber(ARGV[i]), i + REC.N
  local kind, worker, pid, id = ARGV[i + REC.kind], ARGV[i + REC.worker], ARGV[i + REC.pid], ARGV[i + REC.id]
  local ask, delay, err, result = ARGV[i + REC.ask], ARGV[i + REC.delay], ARGV[i + REC.err], ARGV[i + REC.result]
  local wq, tkey = KEYS[k], KEYS[k + 1]
  k = k + 2
  local runkey
  if kind == 'child' then
    runkey = KEYS[k]
    k = k + 1
  end
  local code, run = OUT_LOST, OUT_LOST
  if kind == 'batch' then
    -- A batch: REC_BATCH (m), then per member behind the head a MEMBER
    -- (its pid, id and result); KEYS its hashes. Owned only if every
    -- member is (else, lost, nothing changed: a zombie's batch).
    local MEMBER = LAYOUT.MEMBER
    local m = tonumber(ARGV[tail + LAYOUT.REC_BATCH.members])
    local pids, fkeys, fids, fres = {pid}, {}, {}, {}
    for j = 1, m do
      local a = tail + LAYOUT.REC_BATCH.N + MEMBER.N * (j - 1)
      pids[#pids + 1] = ARGV[a + MEMBER.pid]
      fids[j], fres[j] = ARGV[a + MEMBER.id], ARGV[a + MEMBER.result]
      fkeys[j] = KEYS[k + j - 1]
    end
    k = k + m
    local ids = {id}
    for j = 1, m do
      ids[j + 1] = fids[j]
    end
    local codes = {}
    if own_every(wq, pids, ids) then
      code, codes = end_batch(tkey, id, ask, delay, err, result, worker, fkeys, fids, fres)
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
      code = give_back(tkey, id)
    elseif kind == 'stage' then
      code = end_stage(tkey, id, ask, delay, err, worker, tail)
    elseif kind == 'child' then
      local removed
      code, run, removed = end_child(tkey, id, ask, delay, err, result, worker, runkey,
        ARGV[tail + LAYOUT.REC_CHILD.run])
      local STOPPED = LAYOUT.STOPPED
      for j = 1, #(removed or {}), 2 do
        local r = #stopped
        stopped[r + STOPPED.at] = string.format('%d', #out / LAYOUT.ENDED.N + 1)
        stopped[r + STOPPED.queue], stopped[r + STOPPED.id] = removed[j], removed[j + 1]
      end
    else
      code = end_task(tkey, id, ask, delay, err, result, worker)
    end
  end
  local ENDED, o = LAYOUT.ENDED, #out
  out[o + ENDED.outcome], out[o + ENDED.run] = code, run
  i = i + n + 1
end
key_wakes = nil
for channel, n in pairs(woken) do
  redis.call('PUBLISH', channel, n)
end
local taken = {}
if tonumber(ARGV[END.max]) > 0 and now_ms() < tonumber(ARGV[END.deadline]) then
  -- During a slot migration the take may find a task hash moved: then it
  -- takes nothing (the ends above stay applied).
  taken = take_tasks({waiting = waiting, wq = KEYS[8], holders = KEYS[6], seq = KEYS[7], dead = KEYS[2],
    cfg = KEYS[3], tprefix = q.tprefix, park = KEYS[#KEYS]}, ARGV, END) or {}
end
if ARGV[END.limited] == '1' then
  -- A queue with global limits: slots freed here and not taken again may
  -- let another worker start a task (concurrency limit): tell them.
  local ENDED, freed = LAYOUT.ENDED, 0
  for j = 1, #out, ENDED.N do
    if out[j - 1 + ENDED.outcome] ~= OUT_LOST then freed = freed + 1 end
  end
  freed = freed + freed_more - math.floor(#taken / LAYOUT.TAKEN.N)
  if freed > 0 then
    redis.call('PUBLISH', ARGV[END.wake_channel], freed)
  end
end
local END_REPLY, reply = LAYOUT.END_REPLY, {}
reply[END_REPLY.ends], reply[END_REPLY.taken] = out, taken
reply[END_REPLY.members], reply[END_REPLY.stopped] = members, stopped
return reply
