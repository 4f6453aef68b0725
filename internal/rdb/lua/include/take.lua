--- @include "codes"
--- @include "time"
--- @include "fix_type"
--- @include "bury"
--- @include "flow"
--- @include "packed"
--- @include "bytes"
--- @include "park"
--- @include "fair"
-- limit_allowance is how many of max tasks the queue's global limits let a
-- take start now (read from its config hash k.cfg: 'rate' tasks per
-- 'period' ms, at most 'conc' running), and, when a limit cut the take, how
-- long until one more may start: ms (rate), or -1 (concurrency: until a
-- taking ends; a wake-up says so). Running takings are counted from the
-- holdings themselves (the wq hash of every worker in the holder index), so
-- every way a taking ends (end, give back, release, recovery) frees its
-- slot with nothing to decrement, and nothing can leak. Returns nil when a
-- holder's hash is on another cluster node (a slot migration; nothing was
-- written).
-- RATE_TRIM is how many starts that left the window a take trims from a
-- rate log at most.
local RATE_TRIM = 1000

local function limit_allowance(k, w, max)
  local c = redis.call('HMGET', k.cfg, 'rate', 'period', 'conc')
  local allow, wait = max, nil
  local conc = tonumber(c[3])
  if conc and conc > 0 then
    local wqp = string.sub(k.wq, 1, #k.wq - #w)
    local running = 0
    for _, h in ipairs(redis.call('SMEMBERS', k.holders)) do
      local n = redis.pcall('HLEN', wqp .. h)
      if type(n) == 'table' and n.err then
        if string.find(n.err, 'non local key', 1, true) then
          return nil
        end
        error(n.err)
      end
      running = running + n
    end
    if conc - running < allow then
      allow = math.max(conc - running, 0)
      wait = -1
    end
  end
  k.period, k.conc_wait, k.rate_left = nil, wait, nil
  local rate, period = tonumber(c[1]), tonumber(c[2])
  if rate and rate > 0 and period and period > 0 then
    local now = now_ms()
    -- The starts that left the window are the log's first: at most
    -- RATE_TRIM of them are trimmed per take (after a burst, a whole
    -- period's starts leave at once; the next takes trim the rest), and
    -- those left are not counted.
    local gone = redis.call('ZCOUNT', k.rate, '-inf', now - period)
    local left = gone - math.min(gone, RATE_TRIM)
    if gone > left then
      redis.call('ZREMRANGEBYRANK', k.rate, 0, gone - left - 1)
    end
    local used = redis.call('ZCARD', k.rate) - left
    if rate - used <= allow then
      -- Cut, or used up by this take: the next start is allowed when the
      -- oldest start in the window leaves it.
      allow = math.max(rate - used, 0)
      local first = redis.call('ZRANGE', k.rate, left, left, 'WITHSCORES')
      local oldest = tonumber(first[2]) or now
      wait = math.max(oldest + period - now, 1)
      -- (Used up only if the take starts that many: see take_tasks.)
      k.rate_left = rate - used
    end
    k.period = period
  end
  return allow, wait
end

-- RUN_INLINE is how many fields of run hashes a take of a stage queue hands
-- out with its takings, in all: a run keeps the records of every child it
-- fanned out ('k:', 'kq:', 'kr:', 'ke:'), so its HGETALL grows with its
-- children. A run past what is left of it is handed out as its number of
-- fields instead: the worker reads it in steps (HSCAN,
-- Store.ReadRun). Nothing changes it meanwhile but a cancel: its children
-- have all ended (the run moved on) and only this taking's end writes
-- its fields.
local RUN_INLINE = 4000

-- TAKE_BYTES bounds the payloads one take hands out (the first task goes
-- whatever its size), so that no take holds Redis for more than a few ms
-- however large its payloads: a script returns about 1 MiB in 2 ms.
-- The tasks past it go back to the front of their lists, in their order,
-- with a wake-up: the next take (this worker's or another's) goes on. A
-- run handed out with its state counts its state's memory (MEMORY USAGE)
-- against RUN_INLINE_BYTES: a run past what is left is handed out as its
-- number of fields, for the worker to read in steps (Store.ReadRun).
local TAKE_BYTES, RUN_INLINE_BYTES = COPY_BYTES, COPY_BYTES

-- take_refusal is why a take buries the task of hash tkey instead of
-- handing it out (t: its fields as take_tasks read them, ci the index of
-- its cancel mark), or nil.
local function take_refusal(tkey, t, maxc, ci)
  if type(t) ~= 'table' or t.err then
    return fix_type(tkey)
  elseif not t[1] then
    if redis.call('EXISTS', tkey) == 0 then
      return 'missing: no task data for this id'
    end
    return 'corrupt: task data has no payload'
  elseif (t[2] and not tonumber(t[2])) or (t[3] and not tonumber(t[3])) then
    return 'corrupt: attempt or crash count is not a number'
  elseif (tonumber(t[2]) or 0) < 0 or (tonumber(t[3]) or 0) < 0 then
    -- (An attempt of 0 or less is the take's mark for a task not to run.)
    return 'corrupt: attempt or crash count is negative'
  elseif maxc > 0 and (tonumber(t[3]) or 0) >= maxc and not (ci and t[ci]) then
    -- (A task whose cancel marked it where it waited is not buried: it
    -- goes out below with attempt -1, never run, and ends cancelled.)
    return 'crashed: the task was running on ' .. t[3] .. ' workers that died'
  end
  return nil
end

-- take_tasks pops up to max ids from the front of queue k.waiting for
-- worker w and records that w owns each taking (the body of the take
-- script, also run by end to take again in the same call). Bad task data
-- never reaches a worker and never loops: such a task goes to the dead set
-- with the reason. k: waiting, wq, holders, seq, dead, cfg (keys), tprefix,
-- and park (the park hash, when parks > 0). The take's arguments are read
-- from argv by layout L, LAYOUT.TAKE (the take script's) or LAYOUT.END (an
-- end's take): the take's own fields (takeFields in take.go) and the tag's
-- prefixes pfx (prefixFields in keys.go). kind: 'task', 'stage' (the
-- payload slot holds the run's whole hash, or its number of fields past
-- RUN_INLINE) or 'child'; a task or child with metadata (F_META) has
-- {payload, metadata} in the payload slot. maxc (max_crashes): crash limit (0 = none). A task of
-- a task queue whose deadline (F_DEADLINE) has passed is handed out with
-- attempt 0: its worker ends it as expired without running it. safe: see
-- below. levels > 0: the queue has priority levels 1..levels, the lists
-- <waiting>:<level> are taken from first, highest level first, then the
-- waiting list itself, level 0. limited: the queue may have global limits
-- (see limit_allowance). batch > 1 (batches per key): each key's head comes
-- with up to batch-1 tasks of its key, see key_batch_read in key.lua, right
-- after it in the reply, the head's id in their parent field. parks (park)
-- > 0: the worker runs that many takings of the queue at once: a take that
-- finds fewer tasks than it asked for parks it for park_ms, see park.lua
-- (never past the worker's deadline). A plain queue's take (no levels,
-- limits, batches or parking) runs no command for them. Returns the flat
-- reply of take (LAYOUT.TAKEN rows), or nil, 'moved' when, with safe, a
-- task hash is on another cluster node (a slot migration): then nothing
-- changed. When a limit cut the take, the reply ends with one more value,
-- the wait (see limit_allowance).
local function take_tasks(k, argv, L)
  -- safe (the store may run on a Redis Cluster): every task hash is read
  -- before anything is written, ids included. During a slot migration a
  -- hash already moved to the importing node cannot be reached from here
  -- (the ids are read here, so they could not be declared) and Redis does
  -- not undo a script's writes: the take then reports it (nil, 'moved')
  -- having changed nothing.
  local w, max, maxc, kind = argv[L.worker], tonumber(argv[L.max]), tonumber(argv[L.max_crashes]), argv[L.kind]
  local safe, levels, limited = argv[L.safe] == '1', tonumber(argv[L.levels]), argv[L.limited] == '1'
  local batch, parks, park_ms = tonumber(argv[L.batch]), tonumber(argv[L.park]), tonumber(argv[L.park_ms])
  -- (The worker's deadline stays the string it came as: the park hash
  -- keeps it.)
  local worker_deadline = argv[L.deadline]
  local pfx = {queue = argv[L.queue_prefix], wake = argv[L.wake_prefix], sched = argv[L.sched_prefix],
    cancel = argv[L.cancel_prefix], index = argv[L.index_prefix]}
  if kind ~= 'task' then
    batch = 0
  end
  -- fair: the queue's keys share it (see fair.lua): its waiting list (tasks
  -- with no key) first, then the keys' lists, in turn.
  local fair = argv[L.fair] == '1' and kind == 'task'
  local qname = fair and FAIR.queue_of(k.tprefix, k.waiting)
  -- The index in a task's HMGET of F_CANCEL (read in the same command): a
  -- task cancelled while it waited deep in a long list and left there (see
  -- cancel.lua), or a run or a child whose run was cancelled or failed
  -- while it waited deep in its list (stop_task in flow.lua), is handed
  -- out with attempt -1: its worker does not run it, and its end finds the
  -- mark (or its run ended) and ends it as cancelled. A run's stands for
  -- its status (see below).
  -- mi: the index of F_META, the task's metadata (a flow child's, from
  -- its fan-out; a task's, from its enqueue), read by the same HMGET: a
  -- task with metadata has {payload, metadata} in its payload slot. A run
  -- (a stage's take) hands out its whole hash instead.
  local ci, mi = 8, 9
  if kind == 'child' then
    ci, mi = 9, 8
  elseif kind == 'stage' then
    mi = nil
  elseif batch > 0 then
    ci, mi = 9, 10
  end
  local wait
  if limited then
    k.rate = k.cfg .. ':rate'
    max, wait = limit_allowance(k, w, max)
    if not max then
      return nil, 'moved'
    end
    if max <= 0 then
      return {wait}
    end
  end
  local lists = {}
  for l = levels, 1, -1 do
    lists[#lists + 1] = k.waiting .. ':' .. l
  end
  lists[#lists + 1] = k.waiting
  local ids, cut, src = {}, {}, {}
  local need = max
  for j, list in ipairs(lists) do
    local got
    if safe then
      got = redis.call('LRANGE', list, 0, need - 1)
    else
      got = redis.call('LPOP', list, need) or {}
    end
    cut[j] = #got
    for _, id in ipairs(got) do
      ids[#ids + 1] = id
      src[#ids] = j
    end
    need = need - #got
    if need <= 0 then
      break
    end
  end
  -- The keys' turns (fair): each served key's list is one more of lists,
  -- and fkey names the key of each id taken from one.
  local plan, fkey = nil, {}
  if fair and need > 0 then
    plan = FAIR.pick(k.tprefix, qname, need, safe)
    if not plan then
      return nil, 'moved'
    end
    for _, pick in ipairs(plan.picks) do
      if #pick.ids > 0 then
        lists[#lists + 1] = pick.list
        cut[#lists] = #pick.ids
        for _, id in ipairs(pick.ids) do
          ids[#ids + 1] = id
          src[#ids] = #lists
          fkey[#ids] = pick.key
        end
        need = need - #pick.ids
      end
    end
  end
  -- fair_done records what the take did with the keys' turns: the takings
  -- counted per key (fcount), the ids put back (fback) and the pids of the
  -- takings handed out to run, per key (fstarts: a key's rate counts
  -- them); a take left short while keys wait wakes the queue's workers.
  local fcount, fback, fstarts = {}, {}, {}
  local function fair_done()
    if plan and FAIR.commit(plan, fcount, fback, fstarts) then
      redis.call('PUBLISH', pfx.wake .. qname, 1)
    end
  end
  -- Parked (after every read, so that a take that reports 'moved' has
  -- changed nothing).
  local parking = parks > 0 and need > 0
  if #ids == 0 then
    fair_done()
    if parking then
      park(k, w, worker_deadline, parks, park_ms)
    end
    if wait and k.rate_left and k.rate_left > 0 then
      -- The rate's wait counted on starts this take did not make.
      wait = k.conc_wait
    end
    if wait then
      return {wait}
    end
    return {}
  end
  -- give_back puts ids[from..] back at the front of the lists they came
  -- from, in their order (with safe they were read, not popped: left
  -- where they are), drops them from this take, and says so on the
  -- queue's wake channel, for the takes that follow.
  local data, packed, reasons = {}, {}, {}
  local function give_back(from)
    local back, nback = {}, #ids - from + 1
    for i = #ids, from, -1 do
      local j = src[i]
      if safe then
        cut[j] = cut[j] - 1
      else
        back[j] = back[j] or {}
        table.insert(back[j], ids[i])
      end
      if fkey[i] then
        fback[fkey[i]] = (fback[fkey[i]] or 0) + 1
        fkey[i] = nil
      end
      ids[i], data[i], packed[i], reasons[i] = nil, nil, nil, nil
    end
    for j, list in pairs(back) do
      redis.call('LPUSH', lists[j], unpack(list))
    end
    redis.call('PUBLISH', pfx.wake .. string.sub(k.waiting, #pfx.queue + 1), nback)
  end
  -- The tasks' data, at most TAKE_BYTES of payloads (and metadata): from
  -- the first task past it on, the tasks go back (not read when
  -- payload_past tells beforehand).
  local bytes, past = 0, nil
  for i, id in ipairs(ids) do
    local t
    if i > 1 and payload_past(k.tprefix, id, bytes, TAKE_BYTES) then
      past = i
      break
    end
    if kind == 'child' then
      -- A child also hands out its metadata (F_META, set at its fan-out).
      t = redis.pcall('HMGET', k.tprefix .. id, F_PAYLOAD, F_FAILURES, F_CRASHES, F_MAX_ATTEMPTS, F_TIMEOUT, F_PARENT, F_DEADLINE, F_META, F_CANCEL)
    elseif kind == 'stage' then
      -- A run: its status stands for the mark (end_run drops F_CANCEL): a
      -- run no longer running waits in its stage's list only when it was
      -- cancelled there, too deep to be taken out (stop_task in flow.lua).
      t = redis.pcall('HMGET', k.tprefix .. id, F_PAYLOAD, F_FAILURES, F_CRASHES, F_MAX_ATTEMPTS, F_TIMEOUT, F_PARENT, F_DEADLINE, F_RUN_STATUS)
      if type(t) == 'table' and not t.err then
        t[8] = t[8] and t[8] ~= R_RUNNING
      end
    elseif batch > 0 then
      -- A batch head's key (F_KEY) finds the tasks behind it.
      t = redis.pcall('HMGET', k.tprefix .. id, F_PAYLOAD, F_FAILURES, F_CRASHES, F_MAX_ATTEMPTS, F_TIMEOUT, F_PARENT, F_DEADLINE, F_KEY, F_CANCEL, F_META)
    else
      t = redis.pcall('HMGET', k.tprefix .. id, F_PAYLOAD, F_FAILURES, F_CRASHES, F_MAX_ATTEMPTS, F_TIMEOUT, F_PARENT, F_DEADLINE, F_CANCEL, F_META)
    end
    if safe and type(t) == 'table' and t.err and string.find(t.err, 'non local key', 1, true) then
      return nil, 'moved'
    end
    if type(t) == 'table' and not t.err and not t[1] then
      -- No hash: a loaded task waits packed (see packed.lua); its hash is
      -- made below, when it is recorded as taken.
      local p, key, field = packed_payload(k.tprefix, id)
      local err = p == nil and key -- nil: an error (false: no packed field)
      if err and safe and string.find(err, 'non local key', 1, true) then
        return nil, 'moved'
      end
      -- Any other error (a packed hash that is not a hash) must not abort
      -- the take: outside a cluster the ids are popped already and would
      -- be in no list, on a cluster the same id would fail every take. The
      -- task is buried below as having no data.
      if p then
        t[1] = p
        packed[i] = {key, field}
      end
    end
    data[i] = t
    if type(t) == 'table' and not t.err then
      bytes = bytes + #(t[1] or '')
      if mi then
        bytes = bytes + #(t[mi] or '')
      end
    end
    if i > 1 and bytes > TAKE_BYTES then
      past = i
      break
    end
  end
  if past then
    give_back(past)
    parking = false -- tasks wait: the wake-up is for this worker too
  end
  -- Batches (batch > 1, a queue whose worker asks for them): each key's head
  -- comes with up to batch-1 tasks of its key waiting behind it (read here,
  -- taken below), at most 1,000 takings in all. With global limits each
  -- counts as a start: the batches are cut to what the limits allowed.
  local fol, nfol = {}, 0
  if batch > 1 then
    local qname = key_queue_of(k.tprefix, k.waiting, 'q:')
    -- At most 1,000 takings per take (MaxTake), as a plain take.
    local budget = limited and (max - #ids) or (1000 - #ids)
    for i, id in ipairs(ids) do
      local t = data[i]
      -- A head past its deadline is handed out to be expired, alone.
      local late = type(t) == 'table' and not t.err and (ci and t[ci] or tonumber(t[7]) and now_ms() >= tonumber(t[7]))
      if budget > 0 and type(t) == 'table' and not t.err and t[1] and t[8] and not late then
        -- Within TAKE_BYTES (those past it are not read, and stay at the
        -- front of their key's list).
        local f = key_batch_read(k.tprefix, qname, id, t[8], math.min(batch, budget + 1), safe, bytes, TAKE_BYTES)
        if not f then
          return nil, 'moved'
        end
        for _, m in ipairs(f) do
          bytes = bytes + #m.t[1] + #(m.t[8] or '')
        end
        fol[i] = f
        nfol = nfol + #f
        budget = budget - #f
      end
    end
  end
  -- (After every read: fix_type may write.)
  for i, id in ipairs(ids) do
    reasons[i] = take_refusal(k.tprefix .. id, data[i], maxc, ci)
  end
  if kind == 'child' then
    -- A child buried here counts as failed in its run, and a fail-fast
    -- run then stops its other children (up to STOP_SCAN list entries:
    -- about 5 ms). One take buries at most one child, its last, so that
    -- it stops at most one run: the ids behind it go back to the front of
    -- their lists, in their order, for the takes that follow (told by a
    -- wake-up), where the stop finds its run's other children.
    local second
    for i = 1, #ids - 1 do
      if reasons[i] then
        second = i + 1
        break
      end
    end
    if second then
      give_back(second)
    end
  end
  if safe then
    for j, n in pairs(cut) do
      if n > 0 then
        redis.call('LTRIM', lists[j], n, -1)
      end
    end
  end
  if parking then
    park(k, w, worker_deadline, parks, park_ms)
  end
  local last = redis.call('INCRBY', k.seq, #ids + nfol)
  local pid = last - #ids - nfol
  local out = {}
  local TAKEN = LAYOUT.TAKEN
  -- taken_row appends one row of the reply (TAKEN) to out.
  local function taken_row(tid, tpid, payload, attempt, crashes, max_attempts, timeout, parent)
    local r = #out
    out[r + TAKEN.id], out[r + TAKEN.pid], out[r + TAKEN.payload], out[r + TAKEN.attempt] = tid, tpid, payload, attempt
    out[r + TAKEN.crashes], out[r + TAKEN.max_attempts] = crashes, max_attempts
    out[r + TAKEN.timeout], out[r + TAKEN.parent] = timeout, parent
  end
  local inline = RUN_INLINE -- fields of runs left to hand out (a stage queue)
  local inline_bytes = RUN_INLINE_BYTES -- and their memory
  local held = {} -- pid, id, pid, id ... for the worker-queue hash
  local starts = {} -- the pids of the takings handed out to run (the rate log's)
  for i, id in ipairs(ids) do
    pid = pid + 1
    local tkey = k.tprefix .. id
    local t = data[i]
    local reason = reasons[i]
    if reason then
      bury(k.dead, k.cfg, k.tprefix, id, reason, '', w)
      local stopped = buried_in_flow(tkey, id, reason, pfx, k.tprefix, kind == 'child')
      -- (A child that failed its run: in its attempt field the siblings
      -- its run's stop took out of where they waited, queue, id pairs, for
      -- the caller to report.)
      taken_row(id, '', reason, stopped and #stopped > 0 and stopped or '', '', '', '', '')
    else
      local spid = string.format('%d', pid)
      -- (F_STARTED: when the taking was handed out, for its attempt's
      -- history and the Inspector; the take reads Redis time anyway.)
      if fkey[i] then
        -- A key's task (fair): its taking counts in the key's running
        -- count, which the taking's end (or requeue) gives back, once:
        -- F_FAIR_PID says which taking was counted.
        fcount[fkey[i]] = (fcount[fkey[i]] or 0) + 1
        redis.call('HSET', tkey, F_STATE, S_ACTIVE, F_WORKER, w, F_PID, spid, F_STARTED, now_ms(), F_FAIR_PID, spid)
        if packed[i] then
          redis.call('HSET', tkey, F_PAYLOAD, t[1])
          redis.call('HDEL', packed[i][1], packed[i][2])
        end
      elseif packed[i] then
        redis.call('HSET', tkey, F_PAYLOAD, t[1], F_STATE, S_ACTIVE, F_WORKER, w, F_PID, spid, F_STARTED, now_ms())
        redis.call('HDEL', packed[i][1], packed[i][2])
      elseif kind == 'stage' and t[ci] then
        -- A run that ended (cancelled) where it waited: its state stays
        -- its status (end_run's), which no end of this taking rewrites.
        redis.call('HSET', tkey, F_WORKER, w, F_PID, spid)
      else
        redis.call('HSET', tkey, F_STATE, S_ACTIVE, F_WORKER, w, F_PID, spid, F_STARTED, now_ms())
      end
      held[#held + 1] = spid
      held[#held + 1] = id
      local payload
      if kind == 'stage' then
        local n = redis.call('HLEN', tkey)
        -- (MEMORY USAGE walks the hash: not once nothing is left.)
        local size = n <= inline and inline_bytes > 0 and redis.pcall('MEMORY', 'USAGE', tkey, 'SAMPLES', '0')
        if size and type(size) ~= 'number' then
          -- (An embedded Redis of the example knows no SAMPLES.)
          size = redis.pcall('MEMORY', 'USAGE', tkey)
          size = type(size) == 'number' and size or 0
        end
        if size and size <= inline_bytes then
          inline, inline_bytes = inline - n, inline_bytes - size
          payload = redis.call('HGETALL', tkey)
        else
          payload = n -- too big to hand out here: read by the worker
        end
      elseif mi and t[mi] then
        payload = {t[1], t[mi]} -- a task with metadata: {payload, metadata}
      else
        payload = t[1]
      end
      -- Attempt -1: it was cancelled while it waited (the mark wins); 0:
      -- its deadline has passed (Redis time). The worker does not run it:
      -- it ends the taking as cancelled (end, ask cancel) or expired (ask
      -- expire).
      local deadline = kind == 'task' and tonumber(t[7])
      local attempt
      if ci and t[ci] then
        attempt = -1
      elseif deadline and now_ms() >= deadline then
        attempt = 0
      else
        attempt = (tonumber(t[2]) or 0) + 1
        if limited then starts[#starts + 1] = spid end
        if fkey[i] then
          fstarts[fkey[i]] = fstarts[fkey[i]] or {}
          table.insert(fstarts[fkey[i]], spid)
        end
      end
      taken_row(id, spid, payload, attempt, tonumber(t[3]) or 0, t[4] or '', t[5] or '', t[6] or '')
    end
    local f = fol[i]
    if f and #f > 0 then
      -- The head's batch: its pids follow the head's, so that a requeue,
      -- which goes by pid, puts the head back in its place.
      if reason then
        pid = pid + #f
      else
        local _, list, _, count = key_names(k.tprefix, key_queue_of(k.tprefix, k.waiting, 'q:'), t[8])
        redis.call('LTRIM', list, #f, -1)
        key_behind(count, -#f)
        local fids = {}
        for _, m in ipairs(f) do
          pid = pid + 1
          local spid = string.format('%d', pid)
          local fkey = k.tprefix .. m.id
          redis.call('HSET', fkey, F_STATE, S_ACTIVE, F_WORKER, w, F_PID, spid, F_BATCH_OF, id, F_STARTED, now_ms())
          redis.call('HDEL', fkey, F_KEY_DUE)
          held[#held + 1] = spid
          held[#held + 1] = m.id
          if limited then starts[#starts + 1] = spid end
          fids[#fids + 1] = m.id
          -- (Its parent field: the batch's head.)
          local fp = m.t[1]
          if m.t[8] then
            fp = {m.t[1], m.t[8]} -- with its metadata, as a head's
          end
          taken_row(m.id, spid, fp, (tonumber(m.t[2]) or 0) + 1, tonumber(m.t[3]) or 0, m.t[4] or '',
            m.t[5] or '', id)
        end
        redis.call('HSET', tkey, F_BATCH, table.concat(fids, ' '))
      end
    end
  end
  fair_done()
  if #held > 0 then
    redis.call('HSET', k.wq, unpack(held))
    redis.call('SADD', k.holders, w)
    if limited and k.period and #starts > 0 then
      -- The rate log: one entry per start, by Redis time. A taking
      -- handed out not to run (past its deadline, or cancelled where it
      -- waited: attempt 0 or -1) is no start: a backlog of expired tasks
      -- would use up the rate of the live ones behind it.
      local log = {}
      for _, spid in ipairs(starts) do
        log[#log + 1] = now_ms()
        log[#log + 1] = spid
      end
      redis.call('ZADD', k.rate, unpack(log))
      redis.call('PEXPIRE', k.rate, k.period)
    end
  end
  if wait and k.rate_left and #starts < k.rate_left then
    -- The rate's wait counted on starts this take did not make (fewer
    -- tasks waited, or some were handed out not to run): the rate is not
    -- used up, and only the concurrency limit's wait, if any, holds.
    wait = k.conc_wait
  end
  if wait then
    out[#out + 1] = wait
  end
  return out
end
