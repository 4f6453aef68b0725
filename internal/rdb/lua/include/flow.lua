--- @include "codes"
--- @include "time"
-- flow: what the scripts that move flow runs and children share.

-- prefixes reads the sibling-queue and index prefixes from argv[i..i+4].
local function prefixes(argv, i)
  return {queue = argv[i], wake = argv[i + 1], sched = argv[i + 2], cancel = argv[i + 3], index = argv[i + 4]}
end

-- hset_pairs HSETs the field/value pairs of list pairs (from index first,
-- default 1) into key, at most 1,000 pairs per command: a run's state may
-- have more fields than Lua's unpack takes (about 8,000 values), and an
-- error here would abort a script that already claimed its takings.
local function hset_pairs(key, pairs_, first)
  first = first or 1
  for i = first, #pairs_, 2000 do
    redis.call('HSET', key, unpack(pairs_, i, math.min(i + 1999, #pairs_)))
  end
end

-- list_from reads a count at argv[i] and that many values after it; returns
-- the values and the index after them.
local function list_from(argv, i)
  local n = tonumber(argv[i])
  local out = {}
  for j = 1, n do
    out[j] = argv[i + j]
  end
  return out, i + n + 1
end

-- INDEX_TRIM is how many entries of runs past their retention one script
-- call drops from the index keys it touches at most, all of them together
-- (see index_trim), not per run: entries expire in bulk (the runs of a
-- value that ended in a burst), and one call may end many runs (a group
-- commit of stage ends).
local INDEX_TRIM = 1000

-- index_trim drops from index key ix the entries of runs whose retention
-- ended before now (the lowest scores: running runs are +inf, ended ones
-- the time their retention ends), at most what the script call may still
-- drop of INDEX_TRIM. A key expires whole once its last run does, but a
-- value that always has a run going (a tenant, a busy user) never lets
-- it, and would keep one entry per run ever started under it. Called where an
-- entry is added or scored, so the index shrinks faster than it grows;
-- FindRuns never reads these entries.
local function index_trim(ix, now)
  now_ms() -- (makes the run's scratch)
  local left = _call.ixtrims or INDEX_TRIM
  if left <= 0 then
    return
  end
  local old = redis.call('ZCOUNT', ix, '-inf', string.format('(%d', now))
  if old > 0 then
    local n = math.min(old, left)
    redis.call('ZREMRANGEBYRANK', ix, 0, n - 1)
    _call.ixtrims = left - n
  end
end

-- index_expire gives run id's entries in the index zsets their expiry time
-- and lets each index key expire once every run in it has ended (running runs
-- are scored +inf).
local function index_expire(ixkeys, id, at)
  for _, ix in ipairs(ixkeys) do
    index_trim(ix, now_ms())
    redis.call('ZADD', ix, 'XX', at, id)
    local top = redis.call('ZRANGE', ix, -1, -1, 'WITHSCORES')
    if top[2] and top[2] ~= 'inf' then
      redis.call('PEXPIREAT', ix, math.floor(tonumber(top[2])))
    end
  end
end

-- index_keys returns the index keys of a run: one per declared property the
-- run was started with (<index prefix><prop>:<value>); flow_start keeps those
-- values in 'i:<prop>', so a stage rewriting the field does not move them.
local function index_keys(runkey, props, pfx)
  local keys = {}
  for _, prop in ipairs(props) do
    local v = redis.call('HGET', runkey, 'i:' .. prop)
    if v then
      table.insert(keys, pfx.index .. prop .. ':' .. v)
    end
  end
  return keys
end

-- run_index_keys returns a run's index keys from the settings flow_start
-- stored on it (F_RUN_INDEXED: the indexed properties, comma-separated).
local function run_index_keys(runkey, pfx)
  local fi = redis.call('HGET', runkey, F_RUN_INDEXED)
  local props = {}
  if fi and fi ~= '' then
    for p in string.gmatch(fi, '[^,]+') do
      table.insert(props, p)
    end
  end
  return index_keys(runkey, props, pfx)
end

-- stage_index_keys returns the index keys and retention of a run a stage
-- ends: those the run was started with (stored by flow_start), which win
-- over the ending worker's props and retention (its Flow may have changed
-- since: an index entry left at +inf would never expire); the worker's for
-- a run started before they were stored.
local function stage_index_keys(runkey, props, pfx, retention)
  local st = redis.call('HMGET', runkey, F_RUN_INDEXED, F_RUN_RETENTION)
  if not st[1] then
    return index_keys(runkey, props, pfx), retention
  end
  local stored = {}
  for p in string.gmatch(st[1], '[^,]+') do
    table.insert(stored, p)
  end
  return index_keys(runkey, stored, pfx), tonumber(st[2]) or retention
end

-- end_run ends flow run id with status (done, failed, cancelled): the run and
-- its index entries are kept for retention ms. A failed run keeps the list
-- of its latest fan-out's children ('kl'): a fail-fast child failed it,
-- and RetryRun forgets exactly that fan-out's records (run_retry.lua).
local function end_run(tkey, id, status, retention, ixkeys)
  local now = now_ms()
  redis.call('HSET', tkey, F_RUN_STATUS, status, F_STATE, status, F_FINISHED_AT, now)
  if status == R_FAILED then
    redis.call('HDEL', tkey, F_WORKER, F_PID, F_CANCEL)
  else
    redis.call('HDEL', tkey, F_WORKER, F_PID, F_CANCEL, 'kl')
  end
  redis.call('PEXPIRE', tkey, retention)
  index_expire(ixkeys, id, now + retention)
end

-- forward_run moves a run whose stage is complete to the back of the next
-- stage's queue with a wake-up, or ends it as done after the last stage.
-- Returns OUT_FORWARDED or OUT_DONE.
local function forward_run(tkey, id, nexts, pfx, retention, ixkeys, sleep)
  if nexts == '' then
    end_run(tkey, id, R_DONE, retention, ixkeys)
    return OUT_DONE
  end
  redis.call('HDEL', tkey, F_WORKER, F_PID, F_FAILURES, F_CRASHES, F_PENDING, F_ERROR, F_CRASHED_ON, 'kl', F_AWAIT, 'jn')
  if sleep and sleep > 0 then
    -- A durable timer (StageResult.Sleep): the run waits in the next
    -- stage's scheduled set, which the mover empties into its list once
    -- due, as it does a retry.
    redis.call('HSET', tkey, F_STAGE, nexts, F_STATE, S_SCHEDULED)
    redis.call('ZADD', pfx.sched .. nexts, now_ms() + sleep, id)
    return OUT_FORWARDED
  end
  redis.call('HSET', tkey, F_STAGE, nexts, F_STATE, S_QUEUED)
  redis.call('RPUSH', pfx.queue .. nexts, id)
  redis.call('PUBLISH', pfx.wake .. nexts, 1)
  return OUT_FORWARDED
end

-- Signals (Client.Signal). A run whose stage ended awaiting signal NAME
-- (StageResult.Await) sleeps at its next stage, scheduled at its timeout
-- (FLOW.FOREVER without one), and names it in F_AWAIT: signal.lua
-- delivers a signal it awaits by writing its payload as state field NAME
-- and moving the run to its stage's list, in one step, so that the timer
-- and the signal move it once between them. A signal that finds no run
-- awaiting it is kept in the run's hash, 'sp:<name>' = '<expires ms>
-- <payload>', at most FLOW.KEPT names per run ('spk' lists them, each
-- as '<length>:<name>', so that a name may hold any byte), and a stage
-- end that awaits it takes it then. A signal that finds FLOW.KEPT names
-- kept drops those past their time first (FLOW.prune: at most KEPT
-- fields read), so that expired ones never keep a run from a signal.
-- 'sd:<id>' records each signal id taken, delivered or kept, so that a
-- signal sent again is not taken twice: the last FLOW.IDS of them, in a
-- ring ('sdq' counts them, 'sr:<slot>' names the id in each slot), so that
-- a run fed signals for ever keeps a bounded hash. All are fields of the
-- run's hash: they go when the run does. (One table: a script holds at
-- most 200 locals, its includes' among them.)
local FLOW = {KEPT = 16, IDS = 256, FOREVER = 100 * 365 * 24 * 3600 * 1000}

-- FLOW.kept returns the names of the signals run tkey keeps ('spk').
function FLOW.kept(tkey)
  local s, out, i = redis.call('HGET', tkey, 'spk'), {}, 1
  while s and i <= #s do
    local c = string.find(s, ':', i, true)
    local n = c and tonumber(string.sub(s, i, c - 1))
    if not n then
      break -- (changed by hand: what follows is not read)
    end
    out[#out + 1] = string.sub(s, c + 1, c + n)
    i = c + n + 1
  end
  return out
end

-- FLOW.store writes names as the signals run tkey keeps ('spk').
function FLOW.store(tkey, names)
  if #names == 0 then
    redis.call('HDEL', tkey, 'spk')
    return
  end
  local parts = {}
  for k, n in ipairs(names) do
    parts[k] = #n .. ':' .. n
  end
  redis.call('HSET', tkey, 'spk', table.concat(parts))
end

-- FLOW.live returns the payload of kept signal value v ('<expires ms>
-- <payload>') while it has not expired, else nil.
function FLOW.live(v)
  local sp = v and string.find(v, ' ', 1, true)
  if sp and (tonumber(string.sub(v, 1, sp - 1)) or 0) > now_ms() then
    return string.sub(v, sp + 1)
  end
  return nil
end

-- FLOW.prune drops the kept signals of run tkey (names, as FLOW.kept
-- read them) that expired, and returns the names left.
function FLOW.prune(tkey, names)
  if #names == 0 then
    return names
  end
  local fields = {}
  for k, n in ipairs(names) do
    fields[k] = 'sp:' .. n
  end
  local vals = redis.call('HMGET', tkey, unpack(fields))
  local left, gone = {}, {}
  for k, n in ipairs(names) do
    if FLOW.live(vals[k]) then
      left[#left + 1] = n
    else
      gone[#gone + 1] = fields[k]
    end
  end
  if #gone > 0 then
    redis.call('HDEL', tkey, unpack(gone))
    FLOW.store(tkey, left)
  end
  return left
end

-- FLOW.fan_out fans out the children of run id (hash tkey) that list
-- children holds as FANOUT records: each child's hash (its payload, its
-- run, the stage nexts the run moves to when the last child ends, the
-- fan-out's policy, failfast or continue, and its metadata) and its place
-- at the back of its queue (wake(queue) announces it), each counted
-- pending in the run, which waits for them (state children). A stage's
-- done end (ending.lua) and a run started fanned out (flow_start.lua)
-- share it. Returns how many.
function FLOW.fan_out(tkey, id, children, tprefix, pfx, nexts, policy, wake)
  local FANOUT = LAYOUT.FANOUT
  local n = 0
  -- The fan-out's number in the run ('kg'), kept on each child ('pe'): a
  -- dead child is requeued into its run only while the run waits for that
  -- fan-out (dead.lua).
  local gen = redis.call('HINCRBY', tkey, 'kg', 1)
  local cids = {} -- 'kl': this fan-out's children, for a stop (see stop_task)
  for k = 0, #children - 1, FANOUT.N do
    local cid, cq = children[k + FANOUT.id], children[k + FANOUT.queue]
    local payload, meta = children[k + FANOUT.payload], children[k + FANOUT.meta]
    local ckey = tprefix .. cid
    redis.call('HSET', ckey, F_PAYLOAD, payload, F_PARENT, id, F_PARENT_NEXT, nexts, F_PARENT_POLICY, policy, 'pe', gen)
    if meta ~= '' then
      redis.call('HSET', ckey, F_META, meta)
    end
    redis.call('RPUSH', pfx.queue .. cq, cid)
    redis.call('HSET', tkey, 'k:' .. cid, 'pending', 'kq:' .. cid, cq)
    wake(cq)
    n = n + 1
    cids[n] = cid
  end
  redis.call('HSET', tkey, F_PENDING, n, F_STATE, S_CHILDREN, 'kl', 'g' .. gen .. ' ' .. table.concat(cids, ' '))
  return n
end

-- FLOW.await_run forwards run id (hash tkey) to stage nexts awaiting signal
-- name: a signal kept for it and not expired is taken now (its payload
-- written as the state field, and the run moves on at once), else the run
-- sleeps at nexts until the signal comes or sleep ms (0: without bound)
-- pass.
function FLOW.await_run(tkey, id, name, nexts, pfx, retention, ixkeys, sleep)
  local kept = redis.call('HGET', tkey, 'sp:' .. name)
  if kept then
    redis.call('HDEL', tkey, 'sp:' .. name)
    local names, left = FLOW.kept(tkey), {}
    for _, n in ipairs(names) do
      if n ~= name then
        left[#left + 1] = n
      end
    end
    FLOW.store(tkey, left)
    local payload = FLOW.live(kept)
    if payload then
      redis.call('HSET', tkey, 'f:' .. name, payload)
      return forward_run(tkey, id, nexts, pfx, retention, ixkeys)
    end
  end
  local out = forward_run(tkey, id, nexts, pfx, retention, ixkeys, sleep > 0 and sleep or FLOW.FOREVER)
  redis.call('HSET', tkey, F_AWAIT, name)
  return out
end

-- STOP_SCAN is how many list entries the stops of one run (its stage task,
-- or every pending child of its fan-out) may pass in LREMs: LREM compares
-- each entry it passes (about 13 ms per million), a stage queue may hold a
-- million runs, and a fan-out's 1,000 children wait in child queues that
-- other runs' children share, so an unbounded LREM per child could hold
-- Redis for seconds.
local STOP_SCAN = 20000

-- stop_task takes task id (hash tkey) of queue qname out of its waiting list
-- or scheduled set, or, when it runs, marks it and tells its owner. A
-- waiting one is LREMed while its list is within what scan.left (shared by
-- the stops of one run) may still pass; past that it is marked where it
-- waits (F_CANCEL, state cancelled): the take that reaches it hands it out
-- with attempt -1, never run, and its end finds its run ended and drops it
-- (see take.lua). Returns true when it was taken out (nobody runs it);
-- false, and true second when it was left marked in its list. Third: true
-- when it was found where it waited and taken out (its cancel is counted
-- by the caller: no end of a taking will count it).
local function stop_task(pfx, tkey, id, qname, scan)
  local s = redis.call('HGET', tkey, F_STATE)
  if s == S_ACTIVE then
    redis.call('HSET', tkey, F_CANCEL, '1')
    redis.call('PUBLISH', pfx.cancel .. qname, id)
    return false
  elseif s == S_SCHEDULED then
    return true, false, redis.call('ZREM', pfx.sched .. qname, id) > 0
  end
  local list = pfx.queue .. qname
  local n = redis.call('LLEN', list)
  if n > scan.left then
    redis.call('HSET', tkey, F_CANCEL, '1', F_STATE, S_CANCELLED)
    return false, true
  end
  scan.left = scan.left - n
  return true, false, redis.call('LREM', list, 1, id) > 0
end

-- latest_kl returns the ids the run's 'kl' lists, space-separated, when
-- it is the list of the run's latest fan-out, else nil. 'kl' starts with
-- its fan-out's number ('g<kg> '): a worker of a version that did not
-- write 'kl' fans out without replacing an earlier list, and a stop or a
-- retry must not take that list for its fan-out's (they read the run whole
-- instead).
local function latest_kl(runkey)
  local v = redis.call('HMGET', runkey, 'kl', 'kg')
  if not v[1] then
    return nil
  end
  local g, ids = string.match(v[1], '^g(%d+) ?(.*)$')
  if not g or g ~= v[2] then
    return nil
  end
  return ids
end

-- fanout_children returns the children of a run's latest fan-out as
-- {id, status, queue} triples. The fan-out lists its children's ids in
-- the run ('kl', space-separated, written with 'kp' and dropped when the
-- run moves on or ends), so they are read with two HMGETs of at most
-- MaxChildren (1,000) fields each: the run's hash keeps the records of
-- every earlier fan-out ('k:', 'kq:', 'kr:', 'ke:' per child), so its
-- HGETALL grows with every fan-out. A run fanned out before 'kl' existed
-- is read whole.
local function fanout_children(runkey)
  local out = {}
  local kl = latest_kl(runkey)
  if not kl then
    local h = redis.call('HGETALL', runkey)
    local queue = {} -- child id -> its queue (its 'kq:' field), from h
    for i = 1, #h, 2 do
      if string.sub(h[i], 1, 3) == 'kq:' then
        queue[string.sub(h[i], 4)] = h[i + 1]
      end
    end
    for i = 1, #h, 2 do
      if string.sub(h[i], 1, 2) == 'k:' then
        local cid = string.sub(h[i], 3)
        out[#out + 1] = {cid, h[i + 1], queue[cid]}
      end
    end
    return out
  end
  local ks, kqs = {}, {}
  for cid in string.gmatch(kl, '[^ ]+') do
    ks[#ks + 1] = 'k:' .. cid
    kqs[#kqs + 1] = 'kq:' .. cid
  end
  if #ks == 0 then
    return out
  end
  local st = redis.call('HMGET', runkey, unpack(ks))
  local qs = redis.call('HMGET', runkey, unpack(kqs))
  for i = 1, #ks do
    out[i] = {string.sub(ks[i], 3), st[i], qs[i]}
  end
  return out
end

-- cancel_children stops every pending child of a run's latest fan-out and
-- records each as cancelled in the run. At most MaxChildren children, so
-- one run's stop is bounded; an end call weighs a child's ending that may
-- fail its run as that many (worqr's endWeight), so that one call never
-- stops the children of many runs.
-- It returns the children taken out of where they waited, as queue, id
-- pairs: no end of a taking will report their cancels (the caller does).
local function cancel_children(runkey, pfx, tprefix)
  local scan = {left = STOP_SCAN}
  local marks, removed = {}, {}
  for _, c in ipairs(fanout_children(runkey)) do
    local cid = c[1]
    if c[2] == 'pending' then
      local out, _, found = stop_task(pfx, tprefix .. cid, cid, c[3], scan)
      if out then
        redis.call('DEL', tprefix .. cid)
      end
      if found then
        removed[#removed + 1] = c[3]
        removed[#removed + 1] = cid
      end
      marks[#marks + 1] = 'k:' .. cid
      marks[#marks + 1] = 'cancelled'
    end
  end
  hset_pairs(runkey, marks)
  return removed
end

-- Joins (Stage.Branches): a stage with branches fans out one child per
-- branch when its run first comes to it (a stage end whose policy ends in
-- ' all' or ' any', its next stage the stage itself); their fan-in marks
-- the run joined there ('jn' = that stage, rdb.FieldJoined), so that its
-- next taking runs the stage's handler, the join, and the run's next
-- forward clears the mark. A branch's state fields are merged into the run when it ends
-- done, in its end's step. ' any': the first branch done cancels the
-- others (as a fail-fast failure does) and moves the run on.

-- child_ended counts the end of child cid in its run, once: done (result,
-- and a branch's state fields: a list of 'f:' name/value pairs, or nil) or
-- failed (err, with the child's fan-out policy F_PARENT_POLICY and the run's
-- next stage F_PARENT_NEXT, both stored on the child at fan-out). The run
-- ends failed (fail-fast) or moves on when this was its last pending child
-- (or, a branch of a join on any, the first done).
-- Returns the run's outcome: OUT_LOST (unchanged), OUT_DONE, OUT_DEAD
-- (failed) or OUT_FORWARDED; with OUT_DEAD or a join on any's
-- OUT_FORWARDED, the children it took out of where they waited
-- (cancel_children).
local function child_ended(runkey, runid, cid, ckey, ok, result, err, pfx, tprefix, fields)
  local r = redis.call('HMGET', runkey, F_RUN_STATUS, 'k:' .. cid, F_RUN_RETENTION)
  if r[1] ~= R_RUNNING or r[2] ~= 'pending' then
    return OUT_LOST
  end
  local c = redis.call('HMGET', ckey, F_PARENT_NEXT, F_PARENT_POLICY)
  local onfail, join = string.match(c[2] or '', '^(%a*) ?(%a*)$')
  local retention = tonumber(r[3]) or 86400000
  local removed
  if ok then
    redis.call('HSET', runkey, 'k:' .. cid, 'done')
    if result and result ~= '' then
      redis.call('HSET', runkey, 'kr:' .. cid, result)
    end
    if fields and #fields > 0 then
      hset_pairs(runkey, fields)
    end
    if join == 'any' then
      removed = cancel_children(runkey, pfx, tprefix)
    end
  else
    redis.call('HSET', runkey, 'k:' .. cid, 'failed', 'ke:' .. cid, err)
    if onfail ~= 'continue' then
      removed = cancel_children(runkey, pfx, tprefix)
      end_run(runkey, runid, R_FAILED, retention, run_index_keys(runkey, pfx))
      return OUT_DEAD, removed
    end
  end
  if not removed and redis.call('HINCRBY', runkey, F_PENDING, -1) > 0 then
    return OUT_LOST
  end
  local out = forward_run(runkey, runid, c[1] or '', pfx, retention, run_index_keys(runkey, pfx))
  if join ~= '' and out == OUT_FORWARDED then
    redis.call('HSET', runkey, 'jn', c[1])
  end
  return out, removed
end

-- child_of reads child task tkey's run id and fan-out number ('pe', the
-- run's 'kg' when it fanned out) (nil, nil when it is no child; nil and
-- the error on a read error). A child fanned out by an earlier version
-- kept its number in F_PROGRESS, which its handler's progress report
-- overwrote: that is read when 'pe' is not there.
local function child_of(tkey)
  local c = redis.pcall('HMGET', tkey, F_PARENT, 'pe', F_PROGRESS)
  if type(c) ~= 'table' or c.err then
    return nil, nil, c
  end
  return c[1], c[2] or c[3]
end

-- run_of_child is the run id a child id starts with (<run id>.<suffix>, as
-- a fan-out names its children), or nil.
local function run_of_child(cid)
  return string.match(cid, '^(.+)%.[^.]+$')
end

-- buried_in_flow ends what a buried flow task leaves waiting: a stage run
-- (running) fails; a child counts as failed in its run. in_child says the
-- task was taken from a child queue: a child whose data is gone or corrupt
-- (no F_PARENT) is then counted in the run its id names, if that run still
-- waits for it, so that the run never waits forever. Returns, when the
-- child failed its run (fail-fast), the siblings that took out of where
-- they waited, as queue, id pairs (cancel_children): no end of a taking
-- reports their cancels (the take's caller does).
local function buried_in_flow(tkey, id, reason, pfx, tprefix, in_child)
  local t = redis.call('HMGET', tkey, F_RUN_STATUS, F_PARENT, F_RUN_RETENTION)
  local parent = t[2]
  if not parent and in_child then
    parent = run_of_child(id)
  end
  if t[1] == R_RUNNING then
    redis.call('HSET', tkey, F_RUN_STATUS, R_FAILED, F_FINISHED_AT, now_ms())
    index_expire(run_index_keys(tkey, pfx), id, now_ms() + (tonumber(t[3]) or 86400000))
  elseif parent then
    local _, removed = child_ended(tprefix .. parent, parent, id, tkey, false, '', reason, pfx, tprefix)
    return removed
  end
end
